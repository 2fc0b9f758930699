from model import Eq, Fig, Foot, H, P, Paper, Ref, Tab

PAPER = Paper(
    key="H8VCN5GZ",
    fmt="grobid",
    title="Theta–gamma phase–amplitude coupling in hippocampal CA1 predicts spatial working-memory accuracy in rats",
    authors=[("Tomasz", "Zieliński"), ("Amélie", "Girard"), ("Daniel", "Achterberg"), ("Yara", "Haddad")],
    affiliations=["Laboratory of Systems Neuroscience, Neurocentrum Gdańsk-Oliwa, Poland",
                  "Department of Physiology, University of Utrecht-Noord, the Netherlands"],
    date="2020-10-05",
    journal="Hippocampus Research Letters",
    journal_abbr="Hippocampus Res. Lett.",
    volume="6",
    issue="4",
    pages="233-247",
    first_page=233,
    doi="10.5555/hrl.2020.6.233",
    citation_key="zielinskiThetaGammaPhase2020",
    tags=["neuroscience", "oscillations", "working memory"],
    collections=["Neuroscience"],
    keywords=["hippocampus", "theta oscillation", "gamma oscillation", "cross-frequency coupling", "working memory"],
    abstract=(
        "Cross-frequency coupling between the phase of theta (θ, 6–10 Hz) and the amplitude of gamma "
        "(γ, 30–100 Hz) oscillations has been proposed as a mechanism for organising sequences of "
        "items in working memory. We recorded local field potentials from dorsal CA1 in eight rats "
        "performing a delayed non-match-to-place task on a T-maze with delays of 2, 10 and 30 s. "
        "Coupling strength, quantified by the modulation index, increased on the central stem of the "
        "maze as the animal approached the choice point and was higher on correct than on error "
        "trials (0.0071 ± 0.0009 vs 0.0048 ± 0.0011). The difference was carried by slow gamma "
        "(30–55 Hz) and was largest at the 30 s delay. A logistic model using stem-run coupling "
        "predicted trial outcome with an area under the curve of 0.71. These results link the "
        "temporal organisation of CA1 activity on a trial-by-trial basis to the accuracy of "
        "spatial working memory."
    ),
    body=[
        H("1", "Introduction"),
        P("The hippocampus is required for tasks in which an animal must hold a recently visited "
          "location in mind and use it to guide a subsequent choice. During such tasks, the local field "
          "potential in CA1 is dominated by the theta rhythm, on which faster gamma oscillations ride. "
          "The amplitude of gamma is not constant across the theta cycle but peaks at particular "
          "phases, a phenomenon known as phase–amplitude coupling [1,2]."),
        P("Two bands of gamma are distinguished in CA1. Slow gamma (30–55 Hz) is thought to reflect "
          "input from CA3 and to support retrieval of stored representations, whereas fast gamma "
          "(60–100 Hz) reflects input from the medial entorhinal cortex and is associated with the "
          "encoding of current sensory information [3]. If coupling supports working memory, one would "
          "expect coupling, and slow-gamma coupling in particular, to increase when the animal needs "
          "to retrieve the remembered location, and to be weaker on trials in which it chooses wrongly."),
        P("Earlier studies reported increases in coupling during learning across sessions [4], but "
          "whether coupling predicts the outcome of individual trials is less well established. Here "
          "we tested this in rats performing a delayed non-match-to-place task with variable delays, "
          "which allowed us to vary the memory load while keeping the sensory and motor demands of "
          "each trial constant."),
        H("2", "Materials and methods"),
        H("2.1", "Animals and surgery"),
        P("Eight adult male Lister Hooded rats (350–450 g) were housed individually on a reversed "
          "12 h light cycle and food-restricted to 85–90% of their free-feeding weight. Under isoflurane "
          "anaesthesia, each rat was implanted with a microdrive carrying eight independently movable "
          "tetrodes aimed at dorsal CA1 (AP −3.8 mm, ML 2.4 mm from bregma). Tetrodes were lowered over "
          "one to two weeks until sharp-wave ripples and theta-modulated units were recorded in the "
          "pyramidal layer. All procedures followed national regulations for animal experimentation "
          "and were approved by the local ethics committee."),
        Foot("Present address of D. Achterberg: Institute of Neuroinformatics, Zürich, Switzerland."),
        H("2.2", "Behavioural task"),
        P("Rats were trained on a T-maze with a 100 cm central stem and two 60 cm goal arms. In the "
          "sample phase, one arm was blocked and the rat was rewarded for entering the open arm. After "
          "a delay of 2, 10 or 30 s spent in a start box, both arms were open and the rat was rewarded "
          "only for entering the arm not visited in the sample phase. Each session contained 36 trials "
          "with delays in pseudorandom order, and recording began once the rat reached 80% correct "
          "at the 2 s delay on two consecutive days. The task layout and trial timeline are shown in "
          "Fig. 1."),
        H("2.3", "Electrophysiological analysis"),
        H("2.3.1", "Preprocessing", level=3),
        P("Signals were sampled at 30 kHz, low-pass filtered and downsampled to 1.25 kHz for LFP "
          "analysis. For each rat we used the tetrode in the CA1 pyramidal layer with the largest theta "
          "power. Periods with running speed below 5 cm/s were excluded, and the central stem was "
          "divided into five equal spatial bins."),
        H("2.3.2", "Modulation index", level=3),
        P("Phase–amplitude coupling was quantified with the modulation index (MI) of Tort and "
          "colleagues. The theta phase φ(t) and the gamma amplitude envelope A(t) were obtained by "
          "Hilbert transform of the band-pass filtered signal. The phase was divided into N = 18 bins, "
          "and the mean amplitude in each bin was normalised to give a distribution P(j). The MI is the "
          "Kullback–Leibler divergence of P from the uniform distribution, divided by log N:"),
        Eq(r"\mathrm{MI}=\frac{\log N-H(P)}{\log N},\quad H(P)=-\sum_{j=1}^{N}P(j)\log P(j)", "1",
           plain="MI = (log N − H(P)) / log N, H(P) = −∑ j=1..N P(j) log P(j)"),
        P("Significance was assessed against 200 surrogates in which the amplitude series was shifted "
          "by a random lag of at least 1 s."),
        H("2.4", "Statistics"),
        P("Coupling was compared between correct and error trials with linear mixed models including "
          "rat as a random effect. Trial outcome was predicted with a logistic mixed model using the "
          "mean slow-gamma MI on the stem, the delay and their interaction; predictive accuracy was "
          "estimated with leave-one-session-out cross-validation. Data are given as mean ± SEM."),
        H("3", "Results"),
        H("3.1", "Behaviour"),
        P("Across 118 sessions (14.8 ± 1.6 per rat), performance declined with delay, from 89.6 ± 1.8% "
          "correct at 2 s to 81.2 ± 2.4% at 10 s and 68.9 ± 3.1% at 30 s. Running speed on the stem did "
          "not differ between correct and error trials (Table 1), so that differences in LFP measures "
          "are unlikely to reflect differences in locomotion."),
        Tab("Table 1", "Behavioural measures by delay (mean ± SEM across rats).",
            [["Delay", "Correct (%)", "Stem speed, correct (cm/s)", "Stem speed, error (cm/s)"],
             ["2 s", "89.6 ± 1.8", "41.2 ± 2.6", "40.5 ± 3.0"],
             ["10 s", "81.2 ± 2.4", "40.8 ± 2.2", "41.9 ± 2.8"],
             ["30 s", "68.9 ± 3.1", "39.7 ± 2.5", "40.2 ± 2.9"]], xml_id="tab_0"),
        H("3.2", "Coupling increases towards the choice point"),
        P("Slow-gamma MI rose along the stem, reaching its maximum in the last spatial bin before the "
          "choice point (Fig. 2A). Fast-gamma MI showed no such trend. The rise was steeper at longer "
          "delays: the ratio of MI in the last to the first bin was 1.21 at 2 s, 1.38 at 10 s and 1.62 "
          "at 30 s."),
        H("3.3", "Coupling is weaker on error trials"),
        P("On error trials, slow-gamma MI in the last two stem bins was 32% lower than on correct "
          "trials (0.0048 ± 0.0011 vs 0.0071 ± 0.0009; χ² = 14.2, p < 0.001), while theta power and "
          "gamma power did not differ (Fig. 2B). A logistic model using stem coupling and delay "
          "predicted trial outcome with a cross-validated area under the ROC curve of 0.71 "
          "(95% CI 0.66–0.76), compared with 0.58 for a model using delay alone (Fig. 3)."),
        Fig("Fig. 1", "Delayed non-match-to-place task. (A) T-maze with central stem divided into five "
            "spatial bins. (B) Timeline of a trial: sample run, delay in the start box, choice run.",
            xml_id="fig_0"),
        Fig("Fig. 2", "Theta–slow-gamma coupling on the central stem. (A) Modulation index by spatial "
            "bin for correct trials at each delay. (B) Modulation index in the last two bins on correct "
            "and error trials; each line is one rat.", xml_id="fig_1"),
        Fig("Fig. 3", "Receiver operating characteristic curves for predicting trial outcome from delay "
            "alone and from delay plus stem coupling.", xml_id="fig_2"),
        H("4", "Discussion"),
        P("We found that the coupling of slow gamma to theta phase in CA1 grows as a rat approaches the "
          "point at which it must use a remembered location, and that this coupling is weaker on trials "
          "in which the rat subsequently errs. Because running speed and oscillatory power did not "
          "differ between correct and error trials, the effect is unlikely to reflect gross differences "
          "in behaviour or arousal."),
        P("The specificity to slow gamma fits the proposal that CA3 input, which is thought to drive "
          "slow gamma in CA1, supports retrieval of stored spatial information. A stronger phase "
          "preference of slow gamma would pack the retrieved representation into a narrower part of "
          "each theta cycle, which might make it easier for downstream regions to read out. The "
          "predictive power of coupling was modest, and coupling is clearly not the only determinant "
          "of accuracy; attention, motivation and prefrontal contributions were not measured here."),
        H("5", "Conclusions"),
        P("Theta–slow-gamma coupling in CA1 scales with memory demand and predicts the outcome of "
          "individual working-memory trials, supporting a role for cross-frequency coordination in "
          "retrieval of recent spatial experience."),
    ],
    backmatter=[
        ("Acknowledgements", ["We thank Marieke van der Berg and Paweł Nowicki for help with surgeries "
                              "and behavioural training."]),
        ("Funding", ["This sample study was funded by a fictional national science centre grant "
                     "(NSC 2017/25/B/NZ4/01234)."]),
        ("Data availability", ["Processed LFP features and behavioural data are available from the "
                               "corresponding author on reasonable request."]),
        ("Competing interests", ["The authors declare no competing interests."]),
    ],
    ref_style="numbered",
    references=[
        Ref([("Helena", "Marsh"), ("Ricardo", "Silva")], 2009, "Theta-phase modulation of gamma amplitude in the rat hippocampus",
            "Journal of Hippocampal Physiology", "12", "411–425", "10.5555/jhp.2009.411"),
        Ref([("Jan", "Kowalski"), ("Ayşe", "Demir"), ("Felix", "Braun")], 2012, "Cross-frequency coupling in cortical and hippocampal circuits",
            "Neural Dynamics Reviews", "8", "99–131"),
        Ref([("Laila", "Rahimi"), ("Tom", "Ekström")], 2014, "Slow and fast gamma carry distinct inputs to CA1",
            "Hippocampus Research Letters", "1", "12–24", "10.5555/hrl.2014.12"),
        Ref([("Sofia", "Andersson"), ("Paolo", "Greco"), ("Miguel", "Ortega")], 2017, "Learning-related increases in theta–gamma coupling",
            "Journal of Memory Circuits", "3", "201–213"),
        Ref([("Greta", "Holm")], 2019, "Delayed non-match-to-place tasks in rodents: a methods review",
            "Behavioural Methods", "22", "55–70"),
    ],
    extra_notes=["<p>Compare slow-gamma result with the delay-dependence in Holm 2019; "
                 "check whether θ power was matched across correct and error trials (Table 1 only shows speed).</p>"],
    layout={},
    exercises=["GROBID TEI XML (paper.tei.xml)", "teiHeader title/authors/affiliations/abstract/keywords",
               "flat body <div>s with <head n=...> giving H1/H2/H3 depth (2.3 → 2.3.1, 2.3.2)",
               "<formula> with label, in-text <ref type='figure'/'table'/'bibr'>",
               "figures and table collected at the end of <body> (as GROBID does), table as <figure type='table'> with rows",
               "foot <note>", "back: div type=acknowledgement, div type=annex (Funding, Data availability, Competing interests)",
               "listBibl/biblStruct references", "no page furniture (GROBID strips it)",
               "non-ASCII: θ, γ, φ, χ², Zieliński, Amélie, Gdańsk, Zürich, en dash"],
)
