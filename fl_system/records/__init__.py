"""What a run leaves behind and who reads it: its folder, metrics, log lines, checkpoint,
trackers (MLflow, TensorBoard, W&B) and fl-compare."""
