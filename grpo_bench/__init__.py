"""grpo-bench: ten GRPO-style methods (DanceGRPO, FlowGRPO, CPS, SAGE-GRPO and the field) on one shared core."""

__version__ = "0.4.0"
