"""TACO's Tables V, VI, II and VIII in shape."""
