"""What writing the checkpoint and syncing metrics.csv every round costs (`checkpoint.every`)."""
