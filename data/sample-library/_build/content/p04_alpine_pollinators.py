from model import Fig, H, L, P, Paper, Ref, Tab

PAPER = Paper(
    key="W6TB4YRS",
    fmt="mineru",
    title="Pollinator visitation and flowering phenology along an elevation gradient in Swiss alpine meadows",
    authors=[("Martina", "Gfeller"), ("Noé", "Perrin"), ("Aleksander", "Wójcik"), ("Ruth", "Ammann")],
    affiliations=["Institute of Plant Ecology, University of Bern-Aare, Switzerland",
                  "Alpine Field Station Val d’Hérens, Evolène, Switzerland"],
    date="2022-09-30",
    journal="Alpine Ecology and Evolution",
    journal_abbr="Alp. Ecol. Evol.",
    volume="8",
    issue="3",
    pages="e1142",
    first_page=1,
    doi="10.5555/aee.2022.e1142",
    running_head="Alpine Ecology and Evolution · 2022 · Gfeller et al.",
    citation_key="gfellerPollinatorVisitationFlowering2022",
    tags=["ecology", "pollination", "phenology"],
    collections=["Ecology"],
    keywords=["bumblebees", "Diptera", "elevation gradient", "phenological mismatch", "snowmelt"],
    abstract=(
        "Warming advances snowmelt and flowering in alpine meadows, but pollinators may not track "
        "these shifts at the same pace. We recorded 11,406 flower visits on 38 plant species in 24 "
        "meadow plots between 1,600 and 2,600 m a.s.l. in the Val d’Hérens over two seasons that "
        "differed in snowmelt date by 19 days. Bumblebees dominated visits below 2,100 m, whereas "
        "flies, mainly Muscidae and Syrphidae, made up 64% of visits above 2,300 m. Visitation rate "
        "per flower declined with elevation for early-flowering species but not for late-flowering "
        "ones, and in the early-melt year the first flowers at high plots opened on average 6 days "
        "before the first bumblebee queens were recorded. Our results suggest that early-flowering "
        "species at high elevation are most exposed to pollinator shortfall when snow melts early."
    ),
    body=[
        H("1", "Introduction"),
        P("Alpine plants flower in a short window between snowmelt and the first autumn frosts. The "
          "timing of that window is set largely by the date of snowmelt, which has advanced by one to "
          "three weeks over recent decades in many mountain ranges. Whether pollinators follow the same "
          "schedule is less clear. Bumblebee queens emerge from hibernation in response to soil "
          "temperature, flies develop at rates set by air temperature, and neither cue is tightly "
          "coupled to the snow cover of a given meadow."),
        P("Mismatches between flowering and pollinator activity are expected to be most pronounced "
          "where the pollinator season is shortest, that is, at high elevation and for species that "
          "flower immediately after snowmelt. Elevation gradients provide a natural setting to test "
          "this expectation because they compress a wide range of climates into a few kilometres. In "
          "this study we asked (i) how the composition of flower visitors changes with elevation, "
          "(ii) whether visitation rates decline with elevation differently for early- and "
          "late-flowering plants, and (iii) whether an early-melt year widens the gap between first "
          "flowering and first pollinator activity."),
        H("2", "Materials and methods"),
        H("2.1", "Study sites"),
        P("The study was carried out in the Val d’Hérens, a south-facing side valley of the Rhône in "
          "canton Valais. We selected 24 plots of 10 × 10 m in extensively grazed or unmanaged "
          "meadows, four at each of six elevation bands from 1,600 to 2,600 m a.s.l. (Figure S1). "
          "Plots were at least 300 m apart and had similar slope and aspect. Snowmelt date was "
          "recorded with soil temperature loggers buried at 5 cm, taking the first day with a daily "
          "temperature range above 3 K as the melt date."),
        H("2.2", "Flower and visitor surveys"),
        P("Each plot was visited every 5–7 days from snowmelt until the end of flowering in 2020 and "
          "2021. During each visit we counted open flowers of all insect-pollinated species and "
          "observed visitors for 2 × 15 min between 10:00 and 16:00 on days without rain and with "
          "wind speeds below 5 m/s. A visit was recorded when an insect touched the reproductive "
          "organs of a flower. Visitors were identified in the field to the level of:"),
        L(["species for bumblebees (Bombus spp.), using caste and colour pattern;",
           "family for flies (Diptera), with voucher specimens for Syrphidae;",
           "order for all other visitors (beetles, butterflies, other Hymenoptera)."]),
        P("In total we made 1,926 observation periods, corresponding to 482 hours of observation."),
        H("2.3", "Statistical analysis"),
        P("Visitation rate per flower was analysed with generalised linear mixed models with a negative "
          "binomial distribution, with elevation, flowering period (early or late, split at the median "
          "day after snowmelt), year and their interactions as fixed effects and plot and plant species "
          "as random intercepts. The log number of open flowers was included as an offset. The lag "
          "between first flowering and first pollinator record was computed per plot and compared "
          "between years with a paired t-test. All analyses were done in R 4.2."),
        H("3", "Results"),
        H("3.1", "Visitor composition"),
        P("We recorded 11,406 visits, of which 41% were made by bumblebees, 44% by flies, 9% by other "
          "Hymenoptera and 6% by beetles and butterflies. The share of flies increased steadily with "
          "elevation, from 27% at 1,600 m to 64% above 2,300 m (Figure 1). Bombus wurflenii, B. "
          "pyrenaeus and B. gerstaeckeri were the most frequent bumblebees at high elevation."),
        Fig("Figure 1.", "Proportion of flower visits by visitor group in each elevation band, pooled "
            "over both years. Numbers above bars give the total visits recorded.", kind="chart", height=140),
        H("3.2", "Visitation rates and flowering period"),
        P("Visitation rate per flower declined with elevation for early-flowering species (slope "
          "−0.41 per 100 m on the log scale, 95% CI −0.55 to −0.27) but not for late-flowering "
          "species (−0.06, −0.19 to 0.07; interaction p < 0.001; Table 1). The decline was steeper "
          "in the early-melt year 2020."),
        Tab("Table 1.", "Estimates from the negative binomial mixed model of visitation rate per flower.",
            [["Term", "Estimate", "SE", "z", "p"],
             ["Intercept", "-2.13", "0.21", "-10.1", "<0.001"],
             ["Elevation (100 m)", "-0.41", "0.07", "-5.9", "<0.001"],
             ["Late flowering", "-0.38", "0.16", "-2.4", "0.017"],
             ["Year 2021", "0.22", "0.09", "2.4", "0.015"],
             ["Elevation × late flowering", "0.35", "0.08", "4.4", "<0.001"]]),
        H("3.3", "Onset of flowering and pollinator activity"),
        P("Snow melted on average 19 days earlier in 2020 than in 2021. In 2020, the first flowers at "
          "plots above 2,300 m opened on average 6.2 ± 2.9 days before the first bumblebee queen was "
          "recorded, compared with 1.4 ± 2.1 days in 2021 (paired t = 4.8, p = 0.003). Flies were "
          "active from the first survey in both years. Seasonal courses of flowering and visitation for "
          "all plots are shown in Figure S2."),
        H("4", "Discussion"),
        P("Our results support the view that pollination at high elevation shifts from bumblebees to "
          "flies, and that early-flowering species there are the most exposed to a shortfall of "
          "visits. Flies were active from the first day after snowmelt, which may buffer plants against "
          "the late emergence of bumblebee queens, but flies are generally less effective pollinators "
          "per visit because they carry less pollen and move less between conspecific plants. The "
          "widening lag in the early-melt year indicates that the buffer may shrink as snowmelt "
          "advances."),
        P("Two years are a short record, and our design cannot separate the effect of the melt date "
          "from other differences between 2020 and 2021. Long-term monitoring along gradients such as "
          "this one, combined with pollen-limitation experiments, is needed to tell whether the "
          "mismatch we observed translates into lower seed set."),
    ],
    backmatter=[
        ("Author contributions", ["MG and RA designed the study; MG, NP and AW collected the data; MG analysed "
                                  "the data and wrote the first draft; all authors revised the manuscript."]),
        ("Acknowledgements", ["We thank the communes of Evolène and Hérémence for access to the meadows, "
                              "and Zoë Lambiel for help with fly identification."]),
        ("Funding", ["This sample study was supported by a fictional grant of the Swiss Alpine Research "
                     "Fund (SARF 31-0042)."]),
        ("Data availability statement", ["Visit records and plot data are deposited in a public repository "
                                         "under the identifier sheaf-sample-aee-1142."]),
    ],
    ref_style="apa",
    references=[
        Ref([("Beat", "Imboden"), ("Clara", "Vuilleumier")], 2016, "Snowmelt timing and flowering onset in alpine grasslands",
            "Alpine Ecology and Evolution", "2", "45–58", "10.5555/aee.2016.45"),
        Ref([("Johan", "Lindström"), ("Paola", "Rossi")], 2018, "Flies as pollinators in cold environments",
            "Arctic and Alpine Pollination", "11", "201–219"),
        Ref([("Tamsin", "Hughes"), ("Dario", "Esposito"), ("Marek", "Novák")], 2019, "Bumblebee queen emergence and soil temperature",
            "Insect Phenology", "7", "88–99"),
        Ref([("Anouk", "Dubois")], 2021, "Phenological mismatch in mountain plant–pollinator networks",
            "Trends in Mountain Ecology", "4", "301–315"),
    ],
    layout={"columns": 2, "body_size": 9.5, "mineru_style": "v1", "running_header": True},
    exercises=["MinerU content_list.json (older style: every heading text_level 1, title too)",
               "running header on every page (type header), page_number on every page",
               "'Figure S1' / 'Figure S2' cited in text with no such figure in the paper",
               "bulleted list (type list, sub_type text)", "references as plain text blocks under a 'References' heading",
               "back matter: Author contributions, Acknowledgements, Funding, Data availability statement",
               "non-ASCII: Noé, Wójcik, Zoë, Val d’Hérens, ×, −, en dash"],
)
