"""The algorithm: schedules, step kernels, methods, rollouts, the GRPO loss, advantages, trust regions."""
