"""FedGSNR's Table 1 shape: rounds to target per partition, allocation, attacks."""
