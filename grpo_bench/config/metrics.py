"""The names of the metrics a run writes to metrics.jsonl (one line per update), defined once.

Every writer (the trainer's phases, ``evaluation.py``) uses these names; readers (report/, suite/)
may spell them out. The KL names come from the core's KL variants, which compute them.
"""

from __future__ import annotations

# KL (the penalty), and the dual variant's parts; a KL plug-in may log more named parts
from grpo_bench.core.trust_region import KL as KL
from grpo_bench.core.trust_region import KL_MOVING as KL_MOVING
from grpo_bench.core.trust_region import KL_STEPWISE as KL_STEPWISE

UPDATE = "update"

# collect: the rewards of the update's rollouts, over the whole batch (every rank)
REWARD = "reward"  # nan-mean of the composite reward
REWARD_STD_IN_GROUP = "reward_std_in_group"
BAD_REWARDS = "bad_rewards"  # how many rewards were non-finite
ADV_ABS_MEAN = "adv_abs_mean"
REWARD_PARTS = ("vq", "mq", "ta")  # the reward dimensions logged on their own, when the reward scores them


def reward_part(part: str) -> str:
    """reward_vq, reward_mq, reward_ta."""
    return f"{REWARD}_{part}"


# diagnostics (every diag_every updates): measured per-step gradient norms, before any step
GRAD_NORM_PER_STEP = "grad_norm_per_step"

# optimize: means over the update's (sample, trained step) pairs, then its optimizer steps
POLICY_LOSS = "policy_loss"
RATIO_MEAN = "ratio_mean"
CLIP_FRAC = "clip_frac"  # and KL, KL_MOVING, KL_STEPWISE (above)
KL_WEIGHT = "kl_weight"
KL_TARGET = "kl_target"  # the adaptive weight's target (measured at the end of the warm-up with kl_target_auto)
GRAD_NORM = "grad_norm"
OPTIMIZER_STEPS = "optimizer_steps"  # run totals
ANCHOR_COPIES = "anchor_copies"
LOGP_GAP = "logp_gap"  # mean |log p_train - log p_rollout| over the update's first optimizer step (same parameters)
WEIGHTS_CHANGED = "weights_changed"  # share of trainable elements the update's optimizer steps changed (landing.py)
WEIGHTS_CHANGED_WARN = 0.5
"""An update that changes fewer than this share of the trainable elements is reported (train/landing.py warns,
the liveness report flags the cell)."""

# evaluate (ODE sampling, fixed noise): on eval updates only
EVAL_PREFIX = "eval_"
EVAL_AT = "eval_at"  # the number of updates the evaluated policy had
EVAL_ORACLE_VQ, EVAL_ORACLE_MQ, EVAL_ORACLE_TA = "eval_oracle_vq", "eval_oracle_mq", "eval_oracle_ta"
EVAL_CORRECT = "eval_correct"
EVAL_MANIFOLD = "eval_manifold"
EVAL_DIVERSITY = "eval_diversity"
EVAL_REWARD = "eval_reward"


def eval_reward_part(part: str) -> str:
    """eval_reward_vq, eval_reward_mq, eval_reward_ta."""
    return f"{EVAL_REWARD}_{part}"


# compute (train/compute.py; docs/statistics.md "Compute"): run totals after each update, in sample-step
# passes: one model call on one sample at one sampler step (a classifier-free-guidance call counts its two
# halves), a backward through such a call its own unit. Summed over the processes of a launch.
COMPUTE_PREFIX = "compute_"
COMPUTE_ROLLOUT = "compute_rollout"  # rollout forwards (every sampler step of every trajectory)
COMPUTE_REFERENCE = "compute_reference"  # KL anchors' forwards (stored by the rollout, or live at loss time)
COMPUTE_TRAIN_FORWARD = "compute_train_forward"  # the loss's forwards (with grad)
COMPUTE_TRAIN_BACKWARD = "compute_train_backward"  # their backwards
COMPUTE_DIAG_FORWARD = "compute_diag_forward"  # diagnostic per-step gradient norms (diag_every), anchors included
COMPUTE_DIAG_BACKWARD = "compute_diag_backward"
COMPUTE_EVAL = "compute_eval"  # evaluation forwards (ODE sampling of the held-out prompts)
COMPUTE_TRAINING = "compute_training"  # what training costs, the equal-compute axis: rollout + reference + train
COMPUTE_COUNTS = (COMPUTE_ROLLOUT, COMPUTE_REFERENCE, COMPUTE_TRAIN_FORWARD, COMPUTE_TRAIN_BACKWARD,
                  COMPUTE_DIAG_FORWARD, COMPUTE_DIAG_BACKWARD, COMPUTE_EVAL)
TRAINING_COUNTS = (COMPUTE_ROLLOUT, COMPUTE_REFERENCE, COMPUTE_TRAIN_FORWARD, COMPUTE_TRAIN_BACKWARD)
COMPUTE_SECONDS = "compute_seconds"  # run total of time_rollout + time_reward + time_train (this process)

# wall-clock seconds per phase (not reproducible: tests leave them out)
TIME_ROLLOUT, TIME_REWARD, TIME_TRAIN = "time_rollout", "time_reward", "time_train"
TIME_DIAG, TIME_EVAL = "time_diag", "time_eval"
TIMES = (TIME_ROLLOUT, TIME_REWARD, TIME_TRAIN, TIME_DIAG, TIME_EVAL, COMPUTE_SECONDS)

