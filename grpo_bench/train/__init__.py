"""Training one run: the trainer and its phases, checkpoints, parallel launch, tracking, evaluation, export
(what the run is, its config and identity, is grpo_bench/config/)."""
