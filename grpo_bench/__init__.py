"""grpo-bench: DanceGRPO, FlowGRPO, CPS and SAGE-GRPO on one shared rollout/reward/optimizer core."""

__version__ = "0.4.0"
