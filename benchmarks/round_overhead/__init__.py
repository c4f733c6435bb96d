"""What a federated round costs on top of training: time, CPU by role, bytes."""
