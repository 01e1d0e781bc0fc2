"""Tables and figures of the paper, built from finished runs (``runs/``) and written to ``figures/``."""
