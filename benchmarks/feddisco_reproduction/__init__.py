"""FedDisco's Table 2: FedAvg and SCAFFOLD with and without Disco weights."""
