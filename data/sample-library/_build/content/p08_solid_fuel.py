from model import Fig, H, P, Paper, Ref, Tab

PAPER = Paper(
    key="T5GM2QWN",
    fmt="pdf",
    title="Household solid-fuel use and acute lower respiratory infection in children under five: a matched case–control study",
    authors=[("Anjali", "Raghunathan"), ("Kwame", "Mensah"), ("Eszter", "Kovács"), ("David", "Whitmore")],
    affiliations=["School of Public Health, Eastern Plains University, India",
                  "Department of Epidemiology, Institute of Tropical and Environmental Health, Ghana"],
    date="2019-08-20",
    journal="Environmental Epidemiology Reports",
    journal_abbr="Environ. Epidemiol. Rep.",
    volume="5",
    issue="4",
    pages="310-315",
    first_page=310,
    doi="10.5555/eer.2019.5.310",
    running_head="Environmental Epidemiology Reports 5 (2019) 310–315",
    running_title="Raghunathan et al. · Solid fuel and childhood ALRI",
    citation_key="raghunathanHouseholdSolidfuelUse2019",
    tags=["epidemiology", "air pollution", "child health"],
    collections=["Epidemiology"],
    keywords=["household air pollution", "solid fuel", "pneumonia", "children", "case-control"],
    abstract=(
        "Household air pollution from cooking with wood, dung and crop residues is a leading "
        "environmental risk factor for childhood pneumonia. We conducted a matched case–control "
        "study in 14 rural health sub-centres. Cases were 412 children aged 2–59 months with "
        "acute lower respiratory infection (ALRI) confirmed by a physician; 824 controls were matched "
        "on age, sex and village. Exposure was assessed by questionnaire and, in a subsample, by 48-h "
        "personal monitoring of fine particulate matter (PM2.5). After adjustment, use of solid fuel as "
        "the primary cooking fuel was associated with ALRI (odds ratio 2.14, 95% CI 1.58–2.90), with a "
        "gradient by time the child spent near the stove. Kitchens with a chimney or a separate "
        "building had lower PM2.5 concentrations and weaker associations. Interventions that reduce "
        "exposure in the kitchen, not only fuel switching, deserve attention."
    ),
    body=[
        H("1", "Introduction"),
        P("Acute lower respiratory infection (ALRI) remains the most common infectious cause of death in "
          "children under five worldwide. Around three billion people cook with solid fuels on open "
          "fires or simple stoves, exposing women and young children to high concentrations of fine "
          "particulate matter, carbon monoxide and other combustion products. Meta-analyses of "
          "observational studies suggest that exposure roughly doubles the risk of childhood pneumonia "
          "[1], but estimates vary widely, and randomised trials of improved stoves have shown smaller "
          "effects than expected [2]."),
        P("One explanation for this discrepancy is that stove interventions often reduce exposure less "
          "than intended, because households continue to use traditional stoves alongside new ones and "
          "because kitchen ventilation matters as much as fuel type. We therefore examined the "
          "association between solid-fuel use and ALRI in relation to kitchen characteristics and the "
          "time children spend near the stove, and we measured personal PM2.5 exposure in a subsample."),
        H("2", "Methods"),
        H("2.1", "Study design and setting"),
        P("We conducted a matched case–control study between January 2016 and December 2017 in the "
          "catchment areas of 14 rural health sub-centres. The area is agricultural, with most households "
          "living in single-storey houses and cooking on mud stoves fuelled by wood, dung cakes or crop "
          "residues. The study was approved by the institutional ethics committee, and written informed "
          "consent was obtained from a parent of each child."),
        H("2.2", "Cases and controls"),
        P("Cases were children aged 2–59 months who presented with cough or difficulty breathing and "
          "fast breathing or chest indrawing, and who were diagnosed with ALRI by a study physician. "
          "For each case, two controls without respiratory illness in the previous two weeks were "
          "selected from the same village by random walk from the case household, matched on sex and "
          "age within three months."),
        H("2.3", "Exposure assessment"),
        P("Trained interviewers, unaware of case status where possible, administered a structured "
          "questionnaire on the primary and secondary cooking fuels, stove type, kitchen location "
          "(indoor without partition, indoor separate room, separate building, outdoor), presence of a "
          "chimney, and the number of hours per day the child spent within two metres of the stove. In "
          "a random subsample of 160 households, the child's mother wore a personal PM2.5 monitor for "
          "48 h, and the child's exposure was assumed to equal the mother's when the child was carried."),
        H("2.4", "Statistical analysis"),
        P("Odds ratios (ORs) were estimated with conditional logistic regression, adjusting for "
          "maternal education, household wealth index, crowding, parental smoking, breastfeeding, "
          "immunisation status and weight-for-age z score. Effect modification by kitchen type was "
          "examined with interaction terms. Analyses were done in Stata 15."),
        H("3", "Results"),
        P("We enrolled 412 cases and 824 controls. Solid fuel was the primary cooking fuel in 81% of "
          "case households and 67% of control households. Cases were more often from the poorest wealth "
          "quintile and less often exclusively breastfed in the first six months (Table 1). The "
          "adjusted odds ratios are given in Table 2."),
        Tab("Table 1.", "Characteristics of cases and controls. Values are n (%) or mean (SD).",
            [["Characteristic", "Cases (n = 412)", "Controls (n = 824)"],
             ["Age, months", "17.9 (12.6)", "18.2 (12.4)"],
             ["Girls", "181 (44%)", "362 (44%)"],
             ["Poorest wealth quintile", "118 (29%)", "161 (20%)"],
             ["Mother with no schooling", "139 (34%)", "226 (27%)"],
             ["Exclusive breastfeeding < 6 months", "207 (50%)", "338 (41%)"],
             ["Fully immunised for age", "301 (73%)", "646 (78%)"],
             ["Weight-for-age z < -2", "96 (23%)", "139 (17%)"],
             ["Smoker in household", "164 (40%)", "305 (37%)"],
             ["Crowding, persons per room", "3.4 (1.3)", "3.1 (1.2)"]]),
        Tab("Table 2.", "Adjusted odds ratios (aOR) for ALRI by household exposure.",
            [["Exposure", "Cases", "Controls", "aOR (95% CI)"],
             ["Clean fuel (LPG, electricity)", "78", "272", "1.00"],
             ["Solid fuel, primary", "334", "552", "2.14 (1.58–2.90)"],
             ["Child near stove < 1 h/day", "121", "263", "1.52 (1.06–2.18)"],
             ["Child near stove 1–3 h/day", "128", "189", "2.31 (1.61–3.32)"],
             ["Child near stove > 3 h/day", "85", "100", "3.05 (2.02–4.61)"],
             ["Kitchen with chimney", "47", "91", "1.37 (0.84–2.24)"]]),
        P("The association increased with the time the child spent near the stove, and it was weaker "
          "in households whose kitchens had a chimney or were in a separate building. Mean 48-h personal "
          "PM2.5 concentrations were 312 µg/m³ in households cooking indoors without a partition, "
          "196 µg/m³ with a separate kitchen room, and 118 µg/m³ with a chimney or a separate building "
          "(Figure 1)."),
        Fig("Figure 1.", "Distribution of 48-h personal PM2.5 concentrations by kitchen type in the "
            "monitoring subsample (n = 160). Boxes show the interquartile range.", kind="chart", height=120),
        P("Several sensitivity analyses gave similar results. Restricting the analysis to cases with "
          "radiographically confirmed pneumonia (n = 187) gave an adjusted odds ratio for solid fuel of "
          "2.36 (1.49–3.74). Excluding households in which any member smoked indoors changed the "
          "estimate only slightly (2.05, 1.44–2.92), and so did additional adjustment for the season of "
          "enrolment and for the distance of the household from the health sub-centre. Mixed use of "
          "clean and solid fuels, reported by 96 control households and 58 case households, was "
          "associated with an intermediate risk (1.47, 0.98–2.21), which is consistent with continued "
          "exposure from the traditional stove in households that had acquired a gas connection but "
          "used it only for part of their cooking."),
        P("In the monitoring subsample, the mother's reported daily cooking time correlated "
          "moderately with her 48-h mean PM2.5 concentration (r = 0.41). Concentrations were highest in the winter "
          "months, when cooking and space heating overlap and windows are kept closed, and lowest "
          "during the monsoon, when much cooking moves outdoors or onto covered verandas."),
        H("4", "Discussion"),
        P("In this population, cooking with solid fuel was associated with a doubling of the odds of "
          "ALRI in young children, and the association followed a gradient with the time the child "
          "spent near the stove. Kitchen characteristics that reduce the concentration of smoke in the "
          "child's breathing zone were associated with lower personal exposure and weaker "
          "associations. These findings are consistent with the exposure–response relationships "
          "reported in earlier studies [1,3]."),
        P("The gradient with time spent near the stove has a practical implication. In many "
          "households young children are carried by their mothers or kept close to them while they "
          "cook, because there is nobody else to look after them. Programmes that promote clean fuels "
          "rarely address this, yet keeping children out of the kitchen during cooking costs nothing "
          "and could reduce their exposure substantially even where the fuel does not change. Our "
          "findings on kitchen type point in the same direction: a separate kitchen building or a "
          "functioning chimney reduced personal exposure by more than half, a reduction comparable to "
          "that achieved by many improved stoves in field conditions."),
        H("4.1", "Strengths and limitations"),
        P("Strengths of the study include physician-confirmed cases, matching on village, and personal "
          "exposure measurements in a subsample. Limitations include the possibility of recall bias in "
          "the reporting of time spent near the stove, residual confounding by poverty, and the "
          "assumption that maternal exposure represents the child's exposure. Misclassification of "
          "exposure would probably bias the associations towards the null."),
        H("5", "Conclusions"),
        P("Reducing children's exposure to kitchen smoke requires attention to where and how cooking "
          "takes place, not only to the fuel that is used. Chimneys, separate kitchens and keeping "
          "young children away from the stove are practical measures that deserve evaluation alongside "
          "clean-fuel programmes."),
    ],
    backmatter=[
        ("Acknowledgements", ["We thank the families who took part and the staff of the health "
                              "sub-centres."]),
        ("Funding", ["This sample study was funded by a fictional environmental health research trust "
                     "(grant EHRT-2015-209)."]),
        ("Data availability", ["De-identified data are available from the corresponding author on "
                               "reasonable request."]),
    ],
    ref_style="numbered",
    references=[
        Ref([("Meera", "Iyer"), ("Jonathan", "Price")], 2014, "Household air pollution and childhood pneumonia: a meta-analysis",
            "Environmental Epidemiology Reports", "1", "12–27"),
        Ref([("Samuel", "Owusu"), ("Katrin", "Fischer"), ("Rosa", "Delgado")], 2017, "Improved cookstoves and child pneumonia: a cluster randomised trial",
            "Global Health Trials", "9", "301–312"),
        Ref([("Priyanka", "Sen"), ("Lars", "Eriksen")], 2018, "Personal PM2.5 exposure of women and children in rural kitchens",
            "Exposure Science Letters", "4", "55–63"),
        Ref([("Abena", "Asante"), ("Michael", "Torres")], 2012, "Carbon monoxide and fine particles from biomass cookstoves",
            "Indoor Air Quality Letters", "6", "144–152"),
        Ref([("Rohan", "Bhatt"), ("Ilse", "Vermeulen"), ("Grace", "Achieng")], 2016, "Case definitions for childhood pneumonia in community studies",
            "Paediatric Epidemiology", "11", "90–101"),
        Ref([("Nadia", "Rahman")], 2017, "Kitchen ventilation and household air pollution in South Asia",
            "Building and Health", "3", "23–35"),
        Ref([("Fiona", "McAllister"), ("Ashok", "Nair")], 2018, "Stacking of cooking fuels after clean-energy programmes",
            "Energy for Development", "45", "201–210"),
    ],
    layout={"columns": 2, "body_size": 10},
    exercises=["born-digital PDF with text layer, two-column layout (full-width title/abstract)",
               "running header (journal + short title alternating) and page number on every page",
               "numbered headings 1, 2, 2.1–2.4, 3, 4, 4.1, 5", "two tables with 'Table 1.'/'Table 2.' captions inside a column",
               "chart figure with 'Figure 1.' caption", "back matter: Acknowledgements, Funding, Data availability",
               "non-ASCII via WinAnsi: Kovács, µg/m³, en dashes"],
)
