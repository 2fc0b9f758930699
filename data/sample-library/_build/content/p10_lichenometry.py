from model import P, Paper

PAPER = Paper(
    key="L2YSNC8V",
    fmt="markdown",
    title="On the limits of lichenometric dating of Little Ice Age moraines",
    authors=[("Gudrun", "Halvorsen"), ("Matthias", "Zürcher")],
    affiliations=["Department of Geography, University of Bergen-Fjord, Norway"],
    date="2018-11-15",
    journal="Glacial Chronology Notes",
    journal_abbr="Glac. Chron. Notes",
    volume="3",
    pages="17-19",
    first_page=17,
    doi="10.5555/gcn.2018.3.17",
    item_type="journalArticle",
    citation_key="halvorsenLimitsLichenometricDating2018",
    tags=["glaciology", "commentary"],
    collections=["Earth sciences"],
    keywords=["lichenometry", "moraines", "Little Ice Age"],
    abstract=(
        "A short commentary arguing that lichenometric ages of Little Ice Age moraines carry larger "
        "uncertainties than are usually reported, and suggesting how growth curves, sampling and "
        "reporting could be improved."
    ),
    body=[
        P("Few field methods have been used as widely, or criticised as often, as lichenometry. The "
          "principle is disarmingly simple: crustose lichens such as Rhizocarpon geographicum colonise "
          "freshly exposed rock surfaces and grow outward at a slow and roughly steady rate, so the "
          "diameter of the largest thallus on a moraine should indicate how long ago the ice retreated "
          "from it. For the moraines left by the glacier advances of the Little Ice Age, between about "
          "1550 and 1850, the method has often been the only practical option, because radiocarbon "
          "dating is imprecise for the last few centuries and suitable organic material is rarely "
          "available."),
        P("In this note we argue that the uncertainties attached to lichenometric ages in many regional "
          "chronologies are too small. Our concern is not with the principle of the method but with "
          "three practical steps that are rarely reported in enough detail to be assessed: the "
          "construction of the growth curve, the sampling of the largest lichens, and the conversion of "
          "a measured diameter into an age with an honest error."),
        P("Growth curves are usually calibrated on surfaces of known age, such as gravestones, dated "
          "buildings or historically documented moraines. Such surfaces are few, often lie at lower "
          "elevations than the moraines to be dated, and differ in rock type and microclimate. When we "
          "compiled published calibration points for southern Norway, the ages predicted for a thallus "
          "of 50 mm ranged from 110 to 190 years depending on which curve was used. In several studies "
          "the curve was fitted through fewer than six points, and its uncertainty was not propagated "
          "into the ages at all."),
        P("Sampling introduces a second, less visible, source of error. The largest lichen on a moraine "
          "depends on the area searched, the time spent searching and the observer, and the largest "
          "single thallus is strongly affected by chance colonisation of an older boulder that was "
          "reworked rather than freshly exposed. Using the mean of the five largest thalli, or fitting "
          "an extreme-value distribution to a size–frequency sample, reduces this dependence; yet many "
          "chronologies still rest on single measurements."),
        P("Finally, ages are frequently reported as single years, sometimes with an uncertainty of "
          "±10 years copied from the precision of the calibration dates rather than derived from the "
          "scatter about the growth curve. Combining the three sources of error, we estimate that a "
          "realistic uncertainty for a typical Little Ice Age moraine in Scandinavia or the Alps is "
          "±25 to ±40 years at the 95% level. That is enough to blur the distinction between advances "
          "in the 1750s and the 1780s, which has been used to correlate glacier fluctuations with "
          "volcanic forcing."),
        P("We do not suggest abandoning lichenometry. We suggest that studies report the calibration "
          "points and the fitted curve with its confidence band, describe the search area and the "
          "number of thalli measured, and propagate all of these into the final ages. Where possible, "
          "lichenometric ages should be checked against independent evidence such as historical maps, "
          "tree rings in the forefield or cosmogenic exposure ages, which have become precise enough "
          "to be useful even for the last millennium. With these precautions the method can remain a "
          "valuable, inexpensive complement to other dating techniques on glacier forelands from "
          "Jostedalsbreen to the Rhône Glacier."),
    ],
    exercises=["Markdown paper.md WITHOUT any heading (not even '# Title'): only paragraphs",
               "title comes only from library.json", "short (~650 words) commentary",
               "non-ASCII: Zürcher, ±, en dash in 'size–frequency'"],
)
