"""One file per GRPO method: its kernel, its defaults and its step rule, importing only grpo_bench.api."""
