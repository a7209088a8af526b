"""Pretraining of the embedded world's shipped assets (``grpo-bench pretrain ...``), apart from RL.

* ``base.py``: the base video model (``grpo-bench pretrain base``);
* ``judge.py``: the learned judge, the VideoAlign stand-in (``grpo-bench pretrain judge``), with its
  data in ``judge_data.py`` and its targets and losses in ``judge_targets.py``;
* ``judge_check.py``: the judge's check on fresh base-model samples (stored on its card).
"""
