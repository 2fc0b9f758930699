from model import Fig, H, P, Paper, Ref, Tab

PAPER = Paper(
    key="P9KE3UHB",
    fmt="pdf",
    title="Ionic conductivity of PEO–LiTFSI polymer electrolytes with surface-modified garnet fillers",
    authors=[("Franziska", "Müller-Lenz"), ("Arjun", "Mehta"), ("Sofía", "Castaño")],
    affiliations=["Institute of Electrochemical Energy Storage, University of Ulm-Donau, Germany",
                  "Department of Materials Chemistry, Universidad de Valparaíso Norte, Chile"],
    date="2022-03-01",
    journal="Solid State Ionics Letters",
    journal_abbr="Solid State Ion. Lett.",
    volume="12",
    issue="1",
    pages="41-46",
    first_page=41,
    doi="10.5555/ssil.2022.12.41",
    running_head="Solid State Ionics Letters 12 (2022) 41–46",
    running_title="F. Müller-Lenz et al. / Polymer electrolytes with garnet fillers",
    citation_key="muller-lenzIonicConductivityPEO2022",
    tags=["batteries", "polymer electrolyte"],
    collections=["Materials"],
    keywords=["solid polymer electrolyte", "PEO", "LLZO", "ionic conductivity", "lithium battery"],
    abstract=(
        "Composite electrolytes of poly(ethylene oxide) (PEO), lithium bis(trifluoromethanesulfonyl)imide "
        "(LiTFSI) and ceramic fillers combine the processability of polymers with improved conductivity. "
        "We prepared PEO–LiTFSI membranes (EO:Li = 16:1) containing 0–20 wt% of Ta-doped "
        "Li7La3Zr2O12 (LLZO) particles, either as received or coated with a 2 nm layer of "
        "polydopamine. At 30 °C the coated filler raised the conductivity from 2.1 × 10^-6 to "
        "3.4 × 10^-5 S/cm at 10 wt%, compared with 8.7 × 10^-6 S/cm for the uncoated filler. "
        "Differential scanning calorimetry showed that both fillers suppress crystallinity, but only "
        "the coated particles remained dispersed above 5 wt%. We attribute the additional gain to "
        "percolating interfacial pathways along well-dispersed particles."
    ),
    body=[
        H("1", "Introduction"),
        P("Solid polymer electrolytes based on poly(ethylene oxide) are attractive for lithium metal "
          "batteries because they are flexible, easy to process and compatible with lithium metal. "
          "Their main weakness is a low ionic conductivity at room temperature, typically below "
          "10^-5 S/cm, caused by the crystallinity of PEO below its melting point of about 60 °C. Lithium "
          "ions move mainly through the amorphous phase, coupled to the segmental motion of the polymer "
          "chains."),
        P("Adding ceramic particles is a well-established way to raise the conductivity. Passive fillers "
          "such as silica or alumina reduce crystallinity and create Lewis acid sites that help "
          "dissociate the lithium salt. Active fillers such as garnet-type Li7La3Zr2O12 (LLZO) conduct "
          "lithium ions themselves and can, in principle, provide fast pathways through the composite "
          "[1,2]. In practice the gains are often modest because the particles agglomerate and are "
          "covered by resistive Li2CO3 layers formed on contact with air. In this letter we show that a "
          "thin polydopamine coating solves both problems."),
        H("2", "Experimental"),
        H("2.1", "Filler preparation"),
        P("Ta-doped LLZO powder (Li6.4La3Zr1.4Ta0.6O12, mean particle size 400 nm) was milled, "
          "annealed at 900 °C under argon to remove surface carbonate, and transferred to a glovebox. "
          "For coating, 1 g of powder was dispersed in 100 mL of Tris buffer (pH 8.5) containing "
          "2 mg/mL dopamine hydrochloride and stirred for 30 min, which produced a conformal layer of "
          "about 2 nm as measured by transmission electron microscopy. Coated particles were washed, "
          "dried at 80 °C under vacuum and stored under argon."),
        H("2.2", "Membrane fabrication and measurements"),
        P("PEO (Mw 600,000) and LiTFSI were dissolved in anhydrous acetonitrile at EO:Li = 16:1, the "
          "filler was added at 0, 5, 10, 15 or 20 wt% relative to the polymer, and the slurry was cast "
          "onto PTFE plates. After drying, membranes 80–100 µm thick were punched and sandwiched "
          "between stainless steel blocking electrodes. Impedance spectra were recorded from 1 MHz to "
          "0.1 Hz between 20 and 80 °C, and the bulk resistance was taken from the high-frequency "
          "intercept. Crystallinity was determined by differential scanning calorimetry at 10 K/min."),
        H("3", "Results and discussion"),
        H("3.1", "Conductivity"),
        P("Table 1 lists the conductivities at 30 °C. Uncoated LLZO increased the conductivity by a "
          "factor of four at 10 wt%, in line with earlier reports for passive fillers, and the benefit "
          "declined at higher loadings. Coated LLZO gave a sixteen-fold increase at 10 wt% and retained "
          "most of this gain at 15 wt%. Figure 1 shows the temperature dependence: all samples follow "
          "Vogel–Tammann–Fulcher behaviour above the melting point, while below it the coated "
          "composites show a much smaller drop in conductivity."),
        Tab("Table 1.", "Ionic conductivity at 30 °C and degree of crystallinity Xc of the PEO–LiTFSI membranes.",
            [["Filler", "Loading (wt%)", "Conductivity (S/cm)", "Xc (%)"],
             ["none", "0", "2.1 × 10^-6", "41"],
             ["LLZO", "5", "5.6 × 10^-6", "33"],
             ["LLZO", "10", "8.7 × 10^-6", "29"],
             ["LLZO", "20", "4.9 × 10^-6", "31"],
             ["PDA-LLZO", "5", "1.2 × 10^-5", "30"],
             ["PDA-LLZO", "10", "3.4 × 10^-5", "24"],
             ["PDA-LLZO", "20", "2.2 × 10^-5", "26"]]),
        Fig("Figure 1.", "Arrhenius plot of the ionic conductivity of PEO–LiTFSI membranes without "
            "filler and with 10 wt% uncoated or polydopamine-coated LLZO.", kind="chart", height=170),
        H("3.2", "Crystallinity and dispersion"),
        P("Both fillers reduced the crystallinity of PEO, from 41 % without filler to 24–29 % at "
          "10 wt% (Table 1). The difference in crystallinity between coated and uncoated fillers is "
          "too small to explain the difference in conductivity. Cross-sectional electron micrographs "
          "(Figure 2) show, however, that uncoated particles formed agglomerates of several "
          "micrometres at loadings above 5 wt%, whereas coated particles stayed dispersed up to 15 wt%. "
          "We suggest that well-dispersed particles create a connected network of polymer–ceramic "
          "interfaces along which lithium ions move faster than in the bulk polymer. The catechol "
          "groups of polydopamine may also bind TFSI anions and raise the lithium transference number, "
          "which we are now measuring."),
        Fig("Figure 2.", "Cross-sectional micrographs of membranes with 10 wt% (a) uncoated and (b) "
            "coated LLZO. Outlined squares mark agglomerates.", kind="image", height=130),
        H("4", "Conclusions"),
        P("A 2 nm polydopamine coating on LLZO particles prevents agglomeration in PEO–LiTFSI and raises "
          "the room-temperature conductivity of the composite to 3.4 × 10^-5 S/cm at 10 wt% loading, "
          "four times more than with uncoated particles. The coating is simple, aqueous and scalable, "
          "and may be applied to other ceramic fillers."),
    ],
    backmatter=[
        ("Acknowledgements", ["We thank Dr. Jürgen Haas for the TEM measurements."]),
        ("Funding", ["This sample study was funded by a fictional federal battery research programme "
                     "(project SOLID-2020-15)."]),
        ("Declaration of competing interest", ["The authors declare no competing interests."]),
    ],
    ref_style="numbered",
    references=[
        Ref([("Hyun", "Park"), ("Elena", "Vasquez")], 2015, "Garnet fillers in polymer electrolytes: a review",
            "Solid State Ionics Letters", "5", "1–12"),
        Ref([("Oliver", "Grant"), ("Mina", "Kobayashi"), ("Rafael", "Duarte")], 2018, "Interfacial conduction in ceramic–polymer composites",
            "Journal of Electrochemical Materials", "33", "455–463"),
        Ref([("Kerstin", "Vogel")], 2020, "Polydopamine coatings for battery materials",
            "Advanced Interface Chemistry", "7", "2001234"),
    ],
    layout={"columns": 1, "body_size": 10.5},
    exercises=["born-digital PDF with text layer, single column, 3 pages",
               "font-size/weight heading buckets: title Helvetica-Bold 17pt, H1 bold 11.5pt, H2 bold 10pt, body Times 10.5pt",
               "numbered headings 1, 2, 2.1, 2.2, 3, 3.1, 3.2", "running header + page number on every page",
               "table drawn as positioned text with rules, 'Table 1.' caption; two figures (drawn chart/box) with 'Figure 1.'/'Figure 2.' captions",
               "back matter: Acknowledgements, Funding, Declaration of competing interest", "numbered references",
               "non-ASCII via WinAnsi: Müller-Lenz, Castaño, Valparaíso, °C, µm, ×, en dash"],
)
