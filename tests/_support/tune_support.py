"""A small tuned suite (two settings, two methods and SAGE-GRPO's dual-KL row, a 4-point lr grid): shared by the
tuning tests and the job-phase tests."""

from __future__ import annotations

LRS = [3.0e-5, 1.0e-4, 3.0e-4, 1.0e-3]


def suite_data(**tune) -> dict:
    return {
        "name": "tuned",
        "base": {"kl": "fixed", "updates": 12, "eval_every": 6, "diag_every": 0, "steps": 4, "eval_samples": 1},
        "grid": {"setting": ["A", "B"], "method": ["dance_grpo", "sage_grpo"]},
        "union": [{"method": ["sage_grpo"], "kl": ["dual"], "setting": ["B"]}],
        "seeds": [1000, 1001],
        "tune": {"family": {"setting": "A"}, "grid": {"lr": LRS}, "seeds": [100, 101],
                 "select": {"metric": "reward", "window": 4}, **tune},
        "report": {"tables": ["table2"], "figures": ["reward_curves"], "baseline": {"method": "dance_grpo"}},
    }
