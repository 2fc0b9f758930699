from model import Fig, Foot, H, L, P, Paper, Ref, Tab

PAPER = Paper(
    key="R4N8DWTE",
    fmt="paddleocr-vl",
    title="Efficacy and safety of QLN-482, an oral P2X3 receptor antagonist, in refractory chronic cough: a randomised, double-blind, placebo-controlled, phase 2a crossover trial",
    authors=[("Siobhan", "O'Rourke"), ("Mateus", "Albuquerque"), ("Hanna", "Virtanen"), ("Rahul", "Deshpande"), ("Chloé", "Marchetti")],
    affiliations=[
        "Respiratory Research Unit, St Brendan's University Hospital, Dublin, Ireland",
        "Centre for Clinical Pharmacology, University of Porto Alegre Sul, Brazil",
        "Department of Pulmonary Medicine, Tampere Lakeside Hospital, Finland",
    ],
    date="2023-02-09",
    journal="Respiratory Therapeutics",
    journal_abbr="Respir. Ther.",
    volume="11",
    issue="2",
    pages="145-156",
    first_page=145,
    doi="10.5555/resther.2023.11.145",
    running_head="RESPIRATORY THERAPEUTICS · Volume 11 · Issue 2 · February 2023",
    running_title="O'Rourke et al. · QLN-482 in refractory chronic cough",
    keywords=["chronic cough", "P2X3 antagonist", "QLN-482", "crossover trial", "dysgeusia"],
    citation_key="orourkeEfficacySafetyQLN4822023",
    tags=["clinical trial", "cough", "sample:drug-code"],
    collections=["Clinical medicine"],
    abstract=(
        "Background: Refractory chronic cough is common and disabling, and few treatments work. "
        "QLN-482 is an investigational, orally available antagonist of P2X3 receptors on airway vagal "
        "afferents with more than 200-fold selectivity over P2X2/3 heteromers, which are implicated in "
        "taste disturbance. Methods: In this double-blind, two-period crossover trial at four centres, "
        "adults with refractory chronic cough of at least one year were randomly assigned (1:1) to "
        "QLN-482 50 mg twice daily for 14 days followed by placebo, or the reverse sequence, separated "
        "by a 14-day washout. The primary endpoint was the change in awake cough frequency measured by "
        "24-h ambulatory acoustic monitoring. Findings: 68 participants were randomised and 64 completed "
        "both periods. Awake cough frequency fell by 37.4% (95% CI 24.9–47.8) more with QLN482 than with "
        "placebo (p<0.0001). Taste-related adverse events occurred in 6% of participants on the active "
        "drug and 3% on placebo; none led to discontinuation. Interpretation: Selective P2X3 antagonism "
        "with QLN 482 reduced cough frequency with little taste disturbance, supporting a phase 2b "
        "dose-ranging study."
    ),
    body=[
        H("", "Introduction"),
        P("Chronic cough, defined as a cough lasting longer than eight weeks, affects roughly one in ten "
          "adults and is among the most frequent reasons for referral to respiratory clinics. In a "
          "substantial proportion of patients the cough persists despite thorough investigation and "
          "guideline-based treatment of asthma, gastro-oesophageal reflux and upper airway disease. This "
          "refractory chronic cough is now understood as a disorder of neuronal hypersensitivity, in which "
          "vagal afferent nerves and their central projections respond excessively to innocuous stimuli "
          "such as talking, laughing or changes in air temperature."),
        P("Extracellular ATP, released from the airway epithelium during inflammation or mechanical "
          "stress, activates ligand-gated P2X3 channels on sensory C fibres and is a plausible driver of "
          "this hypersensitivity. Antagonists of P2X3 receptors have reduced cough frequency in several "
          "trials, establishing the target [1,2]. Their clinical use has, however, been limited by taste "
          "disturbance: up to half of patients on the first-generation compounds report dysgeusia or "
          "ageusia, an effect attributed to blockade of P2X2/3 heteromeric channels on gustatory "
          "afferents [3]."),
        P("QLN-482 was designed to separate these effects. In recombinant cell assays it inhibits "
          "homomeric P2X3 channels with an IC50 of 9 nM while sparing P2X2/3 heteromers at "
          "concentrations below 2 µM. In healthy volunteers, single doses up to 400 mg were well "
          "tolerated and steady-state exposure at 50 mg twice daily exceeded the predicted efficacious "
          "concentration throughout the dosing interval [4]. Here we report the first trial of "
          "QLN-482 in patients, designed to establish whether selective P2X3 blockade reduces objective "
          "cough frequency in refractory chronic cough and to estimate the incidence of taste-related "
          "adverse events."),
        H("", "Methods"),
        H("", "Study design and participants", level=2),
        P("This randomised, double-blind, placebo-controlled, two-period crossover trial was done at "
          "four specialist cough clinics in Ireland, Finland and Brazil. Eligible participants were aged "
          "18–80 years, had a chronic cough for at least one year that was refractory to investigation "
          "and treatment according to current guidelines, a normal chest radiograph, and a score of at "
          "least 40 mm on a 100 mm cough severity visual analogue scale at screening. Key exclusion "
          "criteria were current smoking or a smoking history of more than 20 pack-years, a respiratory "
          "tract infection in the previous four weeks, treatment with an angiotensin-converting enzyme "
          "inhibitor, and an estimated glomerular filtration rate below 60 mL/min per 1.73 m². The "
          "protocol was approved by the ethics committee of each site and all participants gave written "
          "informed consent."),
        Foot("Correspondence: S. O'Rourke, Respiratory Research Unit, St Brendan's University Hospital, "
             "Dublin D04 XR72, Ireland. Trial registration: fictional registry SHEAF-CT-0042."),
        H("", "Randomisation and masking", level=2),
        P("Participants were randomly assigned (1:1) to one of two treatment sequences by a central "
          "web-based system using permuted blocks of four, stratified by site. QLN-482 and matching "
          "placebo tablets were identical in appearance, taste and packaging. Participants, "
          "investigators, site staff and the sponsor's study team were masked to allocation until the "
          "database was locked."),
        H("", "Procedures", level=2),
        P("In each treatment period, participants took one tablet of QLN-482 50 mg or placebo twice "
          "daily for 14 days. The periods were separated by a washout of 14 days, more than ten times "
          "the terminal half-life of the drug. Cough was recorded for 24 h with a validated ambulatory "
          "acoustic monitor at baseline and on day 14 of each period, and the recordings were counted "
          "by trained analysts masked to treatment. The following assessments were made at each visit:"),
        L(["cough severity on a 100 mm visual analogue scale;",
           "cough-specific quality of life with the Leicester Cough Questionnaire (LCQ);",
           "taste function with a structured questionnaire and a four-tastant strip test;",
           "vital signs, electrocardiogram, and safety laboratory tests."]),
        H("", "Outcomes", level=2),
        P("The primary endpoint was the placebo-adjusted percentage change from baseline in awake cough "
          "frequency (coughs per hour) on day 14. Secondary endpoints were 24-h cough frequency, "
          "sleep cough frequency, cough severity on the visual analogue scale and the LCQ total score. "
          "Safety endpoints included adverse events coded with the Medical Dictionary for Regulatory "
          "Activities, with a prespecified focus on taste-related events."),
        H("", "Statistical analysis", level=2),
        P("We estimated that 56 participants completing both periods would give 90% power to detect a "
          "30% placebo-adjusted reduction in awake cough frequency at a two-sided α of 0.05, assuming a "
          "within-participant standard deviation of 0.55 on the log scale; 68 were to be randomised to "
          "allow for dropout. Cough frequencies were log-transformed and analysed with a linear "
          "mixed-effects model including treatment, period, sequence and log baseline frequency as fixed "
          "effects and participant as a random effect. Estimates were back-transformed to percentage "
          "changes. The efficacy analysis included all randomised participants with at least one "
          "post-baseline cough recording; the safety analysis included all who took at least one dose."),
        H("", "Results"),
        P("Between March 2021 and May 2022, 112 people were screened and 68 were randomised: 34 to each "
          "sequence (Fig. 1). Four participants withdrew, two because of intercurrent respiratory "
          "infections, one for personal reasons and one because of nausea during the placebo period. "
          "Baseline characteristics are shown in Table 1. Most participants were women in their late "
          "fifties with a median cough duration of more than ten years, which is typical of specialist "
          "cough clinic populations."),
        Fig("Figure 1.", "Trial profile. Of 112 people screened, 68 were randomised to the sequence "
            "QLN-482 then placebo (n=34) or placebo then QLN-482 (n=34); 64 completed both periods.",
            kind="image", height=170),
        Tab("Table 1.", "Baseline characteristics of the randomised participants.",
            [["Characteristic", "All participants (n=68)"],
             ["Age, years", "57.8 (11.2)"],
             ["Women", "49 (72%)"],
             ["Body-mass index, kg/m²", "27.4 (4.6)"],
             ["Duration of cough, years", "11 (5–18)"],
             ["Never smokers", "51 (75%)"],
             ["Awake cough frequency, coughs per h", "31.6 (18.9–52.4)"],
             ["Cough severity VAS, mm", "66 (14)"],
             ["LCQ total score", "10.9 (3.1)"]],
            note="Data are mean (SD), n (%) or median (IQR). VAS=visual analogue scale. LCQ=Leicester Cough Questionnaire."),
        P("Awake cough frequency fell from a geometric mean of 30.2 coughs per h at baseline to 16.8 "
          "coughs per h after 14 days of QLN-482, and to 26.9 coughs per h after placebo. The "
          "placebo-adjusted reduction was 37.4% (95% CI 24.9–47.8; p<0.0001). Effects on 24-h and "
          "sleep cough frequency were similar in direction but smaller at night, when cough rates were "
          "already low (Table 2). The reduction appeared within the first week, as shown by the "
          "interim recordings on day 7 in the subset of participants at the two Irish sites "
          "(Figure 2). Improvements in cough severity and LCQ score exceeded the published minimal "
          "clinically important differences."),
        Tab("Table 2.", "Efficacy outcomes on day 14 (mixed-effects model estimates).",
            [["Outcome", "QLN-482", "Placebo", "Difference (95% CI)", "p value"],
             ["Awake cough frequency, % change", "-44.4", "-11.2", "-37.4 (-47.8 to -24.9)", "<0.0001"],
             ["24-h cough frequency, % change", "-41.0", "-10.6", "-34.0 (-44.9 to -21.0)", "<0.0001"],
             ["Sleep cough frequency, % change", "-28.3", "-9.8", "-20.5 (-38.2 to 2.3)", "0.075"],
             ["Cough severity VAS, mm", "-21.6", "-8.4", "-13.2 (-18.9 to -7.5)", "<0.0001"],
             ["LCQ total score", "2.9", "1.0", "1.9 (1.1 to 2.7)", "<0.0001"]]),
        Fig("Figure 2.", "Awake cough frequency (geometric mean, coughs per h) at baseline, day 7 and "
            "day 14 of each treatment period. Error bars show 95% CIs.", kind="chart", height=150),
        P("Prespecified subgroup analyses did not suggest heterogeneity of the treatment effect by sex, "
          "age group, baseline cough frequency above or below the median, or study site (all interaction "
          "p values >0.2). The effect was somewhat larger in participants with a history of cough "
          "triggered by changes in air temperature, but this subgroup was small and the analysis was "
          "exploratory. Plasma concentrations of QLN-482 measured before the morning dose on day 14 "
          "were above the target concentration in 61 of 64 participants; the three with lower "
          "concentrations had missed doses according to tablet counts. There was no relationship "
          "between trough concentration and the magnitude of the reduction in cough frequency across "
          "the observed range, which is consistent with near-maximal receptor occupancy at this dose."),
        P("Adverse events were reported by 29 (43%) participants while taking QLN-482 and 24 (36%) "
          "while taking placebo; all were mild or moderate. Taste-related adverse events (dysgeusia in "
          "three participants, hypogeusia in one) occurred in four (6%) participants on QLN482 and two "
          "(3%) on placebo, resolved during the washout and did not lead to withdrawal. Strip tests "
          "showed no change in taste recognition thresholds. Headache and nausea were the most common "
          "other events. There were no serious adverse events and no clinically relevant changes in "
          "laboratory values or electrocardiograms."),
        H("", "Discussion"),
        P("In this crossover trial, two weeks of treatment with the selective P2X3 antagonist QLN-482 "
          "reduced objectively measured awake cough frequency by more than a third relative to placebo "
          "in patients with long-standing refractory chronic cough. The magnitude of this effect is "
          "comparable to that reported for less selective compounds at doses that caused taste "
          "disturbance in a large proportion of patients [2,3], whereas taste-related events with "
          "QLN 482 were infrequent and mild. These findings support the hypothesis that the antitussive "
          "and gustatory effects of P2X3 antagonists can be separated pharmacologically."),
        P("Our results add to a growing body of evidence that the purinergic pathway contributes to "
          "cough hypersensitivity in a large proportion of patients. Responses varied widely between "
          "individuals, however: about a quarter of participants had a reduction of less than 10% on "
          "the active drug, whereas others became nearly cough-free. Identifying predictors of response, "
          "such as biomarkers of ATP release or measures of central sensitisation, would help to select "
          "patients for future trials and eventually for treatment. Objective cough monitoring proved "
          "feasible at all sites and should remain the primary endpoint in phase 2b, complemented by "
          "patient-reported outcomes that capture the social and emotional burden of the condition."),
        P("The study has limitations. The treatment periods were short, and we cannot say whether "
          "the effect is maintained, grows or wanes over months of treatment. Crossover designs are "
          "efficient for stable conditions, but carry-over or period effects could bias the estimate; "
          "the washout of 14 days and the absence of a significant sequence effect make this unlikely. "
          "The sample was drawn from specialist clinics and was predominantly female and white, which "
          "limits generalisation. Finally, a single dose was studied, so the dose–response relationship "
          "for efficacy and for taste effects remains to be defined."),
        P("In conclusion, QLN-482 50 mg twice daily reduced cough frequency and improved cough-related "
          "quality of life with a low incidence of taste disturbance. A 12-week, parallel-group, "
          "dose-ranging phase 2b trial is planned."),
    ],
    backmatter=[
        ("Contributors", ["SO'R, MA and HV designed the trial. SO'R, HV, RD and CM recruited participants. "
                          "RD did the statistical analysis. All authors interpreted the data, revised the "
                          "manuscript and approved the final version."]),
        ("Declaration of interests", ["SO'R and HV received consulting fees from the fictional sponsor "
                                      "of this sample study. All other authors declare no competing interests."]),
        ("Data sharing", ["Deidentified participant data and the statistical analysis plan will be made "
                          "available to researchers with an approved proposal after publication."]),
        ("Role of the funding source", ["The sponsor of this fictional sample study had no role in data "
                                        "collection, data analysis, data interpretation or writing of the report."]),
        ("Acknowledgments", ["We thank the participants and the staff of the four cough clinics, and "
                             "Aoife Brennan for coordinating the acoustic analyses."]),
    ],
    ref_style="numbered",
    references=[
        Ref([("Margaret", "Holloway"), ("Farid", "Nasser")], 2015, "ATP-gated ion channels as targets in chronic cough",
            "Respiratory Therapeutics", "3", "201–214"),
        Ref([("Daniel", "Ferreira"), ("Yasmin", "Abdullah"), ("Olga", "Kuznetsova")], 2019, "P2X3 antagonism for refractory chronic cough: a randomised trial",
            "Thorax Research Letters", "7", "512–521"),
        Ref([("Eamon", "Gallagher"), ("Tuula", "Lehtonen")], 2020, "Taste disturbance with purinergic antagonists: mechanisms and incidence",
            "Clinical Pharmacology Insights", "14", "88–97"),
        Ref([("Priya", "Raman"), ("Lukas", "Steiner"), ("Siobhan", "O'Rourke")], 2021, "Phase 1 pharmacokinetics and tolerability of QLN-482 in healthy volunteers",
            "Early Phase Drug Development", "5", "33–41"),
        Ref([("Bernard", "Okoye")], 2018, "Minimal clinically important differences in cough outcomes",
            "Cough Science", "2", "17–25"),
    ],
    layout={"columns": 1, "body_size": 11, "leading": 1.6, "pages_per_line": 5, "abstract_heading": False,
            "heading_style": "plain"},
    exercises=["PaddleOCR-VL result.json, single column, 6 pages → two result lines (5 + 1 pages, running page counter)",
               "drug code in three variants: 'QLN-482', 'QLN482', 'QLN 482'",
               "structured abstract (abstract block without heading)",
               "unnumbered headings (flat paragraph_title: depth is not recoverable from numbering)",
               "bulleted list", "two tables with 'Table 1.'/'Table 2.' titles, image + chart figures ('Figure 1.', 'Fig. 1')",
               "footnote on page 1", "back matter: Contributors, Declaration of interests, Data sharing, Acknowledgments",
               "non-ASCII: Chloé, Siobhan O'Rourke, α, µM, en dash, m²"],
)
