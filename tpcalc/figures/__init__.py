"""Every figure the two seed documents print, recomputed by the calculators the commands use.

Each ``Figure`` names its id (as in seed-figures.yaml), seed and section, what it means, the
text the document prints, and either a computation from config + the document's inputs with a
formatter at the printed precision, or, for measurements the documents cite, the source.
"""
