"""FedCat's Tables 1 and 3 in shape: model concatenation and count selection."""
