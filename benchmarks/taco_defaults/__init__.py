"""TACO's defaults against the paper's rule in short runs."""
