"""TACO's false expulsions, before and after a change."""
