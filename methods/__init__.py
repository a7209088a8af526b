"""One file per GRPO method, each a small registered class (see grpo_bench.core.method)."""
