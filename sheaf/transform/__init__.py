"""Transform layer: render, structure tree, retrieval units, and the one composition of the chain."""
