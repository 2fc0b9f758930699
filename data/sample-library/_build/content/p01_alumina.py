from model import Eq, Fig, H, P, Paper, Ref, Tab

PAPER = Paper(
    key="QX7HK2MA",
    fmt="paddleocr-vl",
    title="Yttrium segregation and creep resistance of fine-grained α-alumina densified by spark plasma sintering",
    authors=[("Jonas", "Müller"), ("Léa", "Fournier"), ("Kenji", "Watanabe"), ("Agnieszka", "Nowak")],
    affiliations=[
        "Institute for Ceramic Materials, Technical University of Karlsruhe-Nord, 76131 Karlsruhe, Germany",
        "Laboratoire de Physique des Matériaux, Université de Lyon-Est, 69622 Villeurbanne, France",
    ],
    date="2021-06-14",
    journal="Journal of Ceramic Microstructures",
    journal_abbr="J. Ceram. Microstruct.",
    volume="41",
    issue="6",
    pages="1187-1196",
    first_page=1187,
    doi="10.5555/jcm.2021.41.1187",
    running_head="Journal of Ceramic Microstructures 41 (2021) 1187–1196",
    running_title="J. Müller et al.",
    keywords=["alumina", "spark plasma sintering", "grain-boundary segregation", "creep", "yttrium"],
    citation_key="mullerYttriumSegregationCreep2021",
    tags=["ceramics", "creep", "sample:two-column"],
    collections=["Materials"],
    abstract=(
        "Fine-grained α-Al2O3 is attractive for structural parts that must resist deformation at "
        "high temperature, but its creep rate rises steeply as the grain size falls. We densified "
        "high-purity alumina powders doped with 0–1000 ppm yttrium by spark plasma sintering (SPS) "
        "at 1250–1350 °C and compared their microstructure, grain-boundary chemistry and tensile "
        "creep behaviour. Doping with 500 ppm Y reduced the final grain size from 0.92 to 0.61 µm "
        "at full density and lowered the steady-state creep rate at 1250 °C and 50 MPa by a factor "
        "of 18 relative to the undoped material. Scanning transmission electron microscopy showed "
        "that yttrium was confined to a segregation layer about 1 nm wide, with an excess of "
        "roughly 2.6 Y atoms per nm² of boundary. Stress exponents close to 2 and an apparent "
        "activation energy that increased from 480 to 690 kJ/mol with doping point to "
        "interface-controlled grain-boundary sliding, in which segregated yttrium slows the "
        "transport of aluminium along the boundary. Above 800 ppm, YAG precipitates formed at "
        "triple junctions and the benefit saturated."
    ),
    body=[
        H("1", "Introduction"),
        P("Polycrystalline alumina is the workhorse of technical ceramics, used for furnace tubes, "
          "cutting inserts, substrates and transparent armour. Its mechanical performance at room "
          "temperature improves as the grain size decreases, which has motivated a long series of "
          "studies on fast sintering routes that reach full density before grains have time to grow. "
          "Spark plasma sintering (SPS), in which a pulsed direct current heats a graphite die and the "
          "powder compact at rates of 100 K/min or more, is the most widely studied of these routes."),
        P("The same small grain size that makes alumina strong at room temperature, however, makes it "
          "weak at high temperature. Creep in fine-grained oxides is dominated by grain-boundary "
          "sliding accommodated by diffusion, and the strain rate scales with the inverse square or "
          "cube of the grain size. A material with 0.5 µm grains can therefore creep three orders of "
          "magnitude faster than one with 5 µm grains under the same load. For high-temperature "
          "applications it is thus essential to find ways of slowing boundary transport without "
          "coarsening the microstructure."),
        P("Isovalent dopants with large ionic radii, in particular yttrium and the lanthanides, have "
          "been reported to reduce the creep rate of alumina by one to two orders of magnitude when "
          "added in amounts of a few hundred ppm [1–4]. The effect is generally attributed to "
          "segregation of the large cations to grain boundaries, where they block the sites or paths "
          "used by aluminium and oxygen for diffusion. Yet most of this evidence comes from "
          "conventionally sintered material with grains of several micrometres, and it is not obvious "
          "that the same mechanism holds when the boundary area per unit volume is ten times larger, "
          "so that the available dopant is spread over far more interface."),
        P("In this work we ask three questions. First, how much yttrium can a sub-micrometre SPS "
          "alumina accommodate at its boundaries before second phases form? Second, does the "
          "segregated yttrium change the rate-controlling creep mechanism or only its kinetics? "
          "Third, is there an optimum dopant level for creep resistance at a given grain size? We "
          "address these questions by combining quantitative STEM analysis of boundary chemistry "
          "with tensile creep tests on the same batches of material."),
        H("2", "Experimental"),
        H("2.1", "Powder processing"),
        P("A commercial high-purity α-alumina powder (99.99 %, median particle size 0.15 µm, "
          "specific surface area 14 m²/g) was used as the starting material. Yttrium was introduced "
          "by mixing the powder with an ethanolic solution of yttrium nitrate hexahydrate in "
          "quantities corresponding to 0, 250, 500, 800 and 1000 ppm Y (cation ratio Y/Al). The "
          "slurries were ball-milled for 12 h with high-purity alumina media, dried under stirring, "
          "sieved through a 63 µm mesh and calcined in air at 600 °C for 2 h to decompose the "
          "nitrate. Chemical analysis by inductively coupled plasma optical emission spectroscopy "
          "confirmed the nominal yttrium contents within ±8 %."),
        H("2.2", "Spark plasma sintering"),
        P("Discs 20 mm in diameter and 4 mm thick were sintered in a graphite die lined with graphite "
          "foil under a vacuum of 5 Pa. The temperature, measured by an axial pyrometer focused 3 mm "
          "from the sample surface, was raised at 100 K/min to the dwell temperature of 1250, 1300 or "
          "1350 °C, where it was held for 10 min under a uniaxial pressure of 80 MPa. The specimens "
          "were then cooled at 50 K/min and annealed in air at 1000 °C for 5 h to remove carbon "
          "contamination and restore oxygen stoichiometry. The sintering conditions and resulting "
          "densities are summarised in Table 1."),
        Tab("Table 1", "Sintering conditions, relative density ρ and mean grain size d of the SPS alumina "
            "batches (mean ± standard deviation of three discs).",
            [["Batch", "Y (ppm)", "T (°C)", "ρ (%)", "d (µm)"],
             ["A0", "0", "1250", "99.1 ± 0.2", "0.92 ± 0.05"],
             ["A250", "250", "1250", "99.3 ± 0.1", "0.74 ± 0.04"],
             ["A500", "500", "1250", "99.4 ± 0.1", "0.61 ± 0.03"],
             ["A800", "800", "1250", "99.2 ± 0.2", "0.59 ± 0.04"],
             ["A1000", "1000", "1300", "99.5 ± 0.1", "0.66 ± 0.05"]]),
        H("2.3", "Microstructural and chemical characterisation"),
        P("Densities were measured by the Archimedes method in distilled water and related to a "
          "theoretical density of 3.987 g/cm³. Polished and thermally etched cross sections were "
          "imaged by scanning electron microscopy, and the mean grain size was determined by the "
          "linear intercept method with a correction factor of 1.56, counting at least 800 grains per "
          "sample. Grain-boundary chemistry was analysed in an aberration-corrected STEM operated at "
          "200 kV using energy-dispersive X-ray spectroscopy (EDS) line scans across edge-on "
          "boundaries. The interfacial excess of yttrium was obtained by integrating the background-"
          "corrected Y signal over the profile and normalising by the boundary area sampled."),
        H("2.4", "Creep testing"),
        P("Dog-bone specimens with a gauge section of 2 × 2 × 10 mm were machined from the discs and "
          "tested in tension in air at 1200–1300 °C under constant stresses between 20 and 80 MPa. "
          "Strain was measured with a laser extensometer on two silicon carbide flags. The "
          "steady-state strain rate was taken as the minimum slope of the strain–time curve after the "
          "primary transient, usually reached at a strain of 1–2 %. The data were analysed with the "
          "phenomenological creep equation"),
        Eq(r"\dot{\varepsilon}=A\,\frac{\sigma^{n}}{d^{p}}\exp\left(-\frac{Q}{RT}\right),", "1"),
        P("where σ is the applied stress, d the grain size, n the stress exponent, p the grain size "
          "exponent and Q the apparent activation energy."),
        H("3", "Results"),
        H("3.1", "Densification and grain size"),
        P("All batches reached relative densities above 99 % (Table 1). Yttrium had a marked effect on "
          "grain growth during the final stage of sintering: at 1250 °C the mean grain size fell from "
          "0.92 µm in the undoped material to 0.61 µm at 500 ppm, with no further reduction at "
          "800 ppm. Fig. 1 compares the microstructures of A0 and A500. The undoped material shows a "
          "broader grain size distribution with occasional grains larger than 2 µm, whereas the doped "
          "material is uniform and free of abnormal grains. Batch A1000 needed a higher sintering "
          "temperature to reach full density and was slightly coarser."),
        Fig("Fig. 1.", "Scanning electron micrographs of thermally etched cross sections of (a) undoped "
            "alumina A0 and (b) 500 ppm Y-doped alumina A500 after SPS at 1250 °C. Scale bars 2 µm.",
            kind="image", height=120),
        H("3.2", "Grain-boundary chemistry"),
        P("EDS line scans across 42 edge-on boundaries of A500 revealed yttrium enrichment at every "
          "boundary examined, confined to a region with a full width at half maximum of about 1 nm. "
          "The mean interfacial excess was 2.6 ± 0.7 atoms/nm², close to the saturation values "
          "reported for coarse-grained alumina. In A800, the excess at general boundaries was not "
          "higher (2.8 ± 0.6 atoms/nm²), but yttrium aluminium garnet (YAG) particles 30–80 nm in "
          "size appeared at about one in six triple junctions. We interpret this as evidence that the "
          "boundaries were saturated at around 600 ppm, given the boundary area of this grain size, "
          "and that excess yttrium precipitated as a second phase."),
        H("3.3", "Creep behaviour"),
        P("Representative creep curves at 1250 °C and 50 MPa are shown in Fig. 2. The undoped material "
          "reached a steady-state strain rate of 4.1 × 10⁻⁵ s⁻¹, whereas A500 crept at "
          "2.3 × 10⁻⁶ s⁻¹, a reduction by a factor of 18 despite its smaller grain size. Normalised to "
          "the same grain size with p = 2, the reduction amounts to a factor of about 40. Stress "
          "exponents between 1.8 and 2.2 were found for all compositions, while the apparent "
          "activation energy rose from 480 ± 30 kJ/mol (A0) to 690 ± 40 kJ/mol (A500). The curves of "
          "A800 and A1000 lay close to that of A500, showing that additions beyond the saturation "
          "level gave no further benefit."),
        Fig("Fig. 2.", "Tensile creep curves (strain versus time) of alumina with 0, 250, 500 and 800 ppm Y "
            "at 1250 °C under 50 MPa. Dashed lines mark the steady-state slopes used for Eq. (1).",
            kind="chart", height=130),
        H("4", "Discussion"),
        P("A stress exponent near 2 is the classical signature of grain-boundary sliding, and its "
          "insensitivity to doping shows that yttrium does not change the deformation mechanism. What "
          "changes is the rate of the process that accommodates sliding. The increase in activation "
          "energy by about 200 kJ/mol is consistent with the view that segregated yttrium lowers the "
          "mobility of aluminium ions in the boundary core, either by occupying kink sites at grain "
          "boundary dislocations or by reducing the density of vacant sites through which transport "
          "occurs. Our data do not distinguish between these two pictures, but the close agreement "
          "between the saturation excess and the onset of the creep plateau suggests that the effect "
          "is governed by boundary coverage rather than by the bulk dopant concentration."),
        P("A practical consequence is that the optimum yttrium addition depends on the grain size: "
          "a finer microstructure has more boundary area to cover and can take up more yttrium before "
          "YAG forms. For the 0.6 µm materials studied here the optimum lies at roughly 500–600 ppm. "
          "Powders designed for even finer microstructures, for example by two-step SPS, would need "
          "proportionally more dopant, which may be limited by the tendency of YAG to pin triple "
          "junctions and nucleate cavities during creep."),
        H("5", "Conclusions"),
        P("Yttrium additions of up to 500 ppm refine the microstructure of SPS alumina and reduce its "
          "tensile creep rate at 1250 °C by more than an order of magnitude. The dopant segregates to "
          "all boundaries with an excess of about 2.6 atoms/nm² and raises the activation energy of "
          "creep without changing the stress exponent. Beyond the saturation level, YAG precipitates "
          "at triple junctions and the benefit levels off. Matching the dopant level to the boundary "
          "area of the target microstructure is therefore the key design rule."),
    ],
    backmatter=[
        ("Acknowledgements", ["We thank Dr. Rainer Köhler for help with the STEM measurements and "
                              "Hélène Dubois for machining the creep specimens."]),
        ("Funding", ["This work was supported by the German–French Ceramics Initiative under grant "
                     "GFCI-2019-044 and by a doctoral fellowship to A. Nowak."]),
        ("Data availability", ["The creep curves and EDS line scans are available from the "
                               "corresponding author on reasonable request."]),
    ],
    ref_style="numbered",
    references=[
        Ref([("Hiroshi", "Tanaka"), ("Maria", "Lindqvist")], 2003, "Creep of yttrium-doped alumina with sub-micrometre grains",
            "Journal of Ceramic Microstructures", "23", "1401–1410"),
        Ref([("Pieter", "de Vries"), ("Samuel", "Okafor"), ("Ewa", "Zielińska")], 2008, "Lanthanide segregation and boundary diffusion in polycrystalline oxides",
            "Acta Ceramica", "56", "3322–3331"),
        Ref([("Carlos", "Mendes"), ("Ingrid", "Solberg")], 2012, "Interfacial excess of large cations in alumina measured by STEM-EDS",
            "Interface Science Letters", "9", "211–219"),
        Ref([("Yuki", "Sato"), ("Jonas", "Müller")], 2017, "Fast sintering routes and high-temperature deformation of fine-grained oxides",
            "Ceramics Review", "38", "55–78"),
        Ref([("Anna", "Berggren"), ("Tomás", "Herrera"), ("Li", "Wen")], 2019, "Yttrium aluminium garnet precipitation at triple junctions in doped alumina",
            "Journal of Ceramic Microstructures", "39", "902–910"),
        Ref([("Nikolai", "Petrov")], 2020, "Grain-boundary sliding models for oxide ceramics: a critical review",
            "Progress in Materials Physics", "112", "100671"),
    ],
    extra_notes=[
        "<p><strong>Extracted Annotations (12/03/2024, 10:15:02)</strong></p>\n"
        "<p>\"Doping with 500 ppm Y reduced the final grain size from 0.92 to 0.61 µm\" "
        "(<a href=\"zotero://open-pdf/library/items/{att}?page=1\">Müller 2021:1187</a>)</p>\n"
        "<p>\"Above 800 ppm, YAG precipitates formed at triple junctions\" "
        "(<a href=\"zotero://open-pdf/library/items/{att}?page=1\">Müller 2021:1187</a>)</p>",
    ],
    layout={"columns": 2, "body_size": 9.5, "pages_per_line": 5, "abstract_heading": True,
            "heading_style": "dot"},
    exercises=["PaddleOCR-VL result.json", "two-column reading order",
               "paragraph split across columns (merged block + empty continuation with group_id)",
               "running journal header + author header, footer and page number on every page",
               "doc_title, abstract heading + abstract, numbered H2/H3 headings ('2.1. Powder processing')",
               "image + chart figures with 'Fig. 1.'/'Fig. 2.' figure_title, table (HTML) with 'Table 1' title",
               "display_formula + formula_number", "back matter: Acknowledgements, Funding, Data availability",
               "reference_content", "non-ASCII: Müller, Léa, α, µm, °C, en dash"],
)
