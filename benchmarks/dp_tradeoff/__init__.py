"""What differential privacy costs: accuracy and epsilon per noise multiplier."""
