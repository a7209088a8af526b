"""Training one run: configuration, the trainer, checkpoints, parallel launch, tracking, evaluation."""
