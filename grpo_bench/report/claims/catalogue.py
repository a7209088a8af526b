"""The catalogue of the paper's claims (``CLAIMS``): each a sentence, the stored suite that tests it and its
checks. A claim is data: add one here, nothing else changes."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_bench.report.claims.as_named import TUNED_ON_TEST_SEEDS, AsNamed
from grpo_bench.report.claims.human_study import WinRates
from grpo_bench.report.claims.learning import Beats, Moves
from grpo_bench.report.claims.speed import Faster
from grpo_bench.report.claims.spread import Spread
from grpo_bench.report.claims.table1 import Samplers

Check = Beats | Moves | Spread | Samplers | WinRates | Faster


@dataclass(frozen=True)
class Claim:
    """One sentence of the paper and the checks that test it on the stored reports."""

    key: str
    text: str
    suite: str
    """Report folder under REPORTS_DIR that holds the evidence ('samplers': Table 1's files)."""
    checks: tuple[Check, ...]
    tested_by: str = ""
    """The suite file whose run tests the claim as stated (named when the stored results lack its rows)."""
    as_named: AsNamed | None = None
    """What the rows it names are (claims/as_named.py): the paper's claims name each row at its own tuned choice on
    test seeds, and a stored row that is not is measured but labelled *not tested as named*; None reads the rows
    as they ran (a synthetic or exploratory claim)."""


AS_SHIPPED = {"max_train_steps": None}
"""suites/field.yaml's second reading: each method as its authors ship it (its own trained steps and KL); a speed
claim is about a method's own recipe, so it reads those rows."""

BASELINES = ({"method": "dance_grpo"}, {"method": "flow_grpo"}, {"method": "cps"})

CLAIMS: tuple[Claim, ...] = (
    # The reading tested: SAGE-GRPO with the dual KL at SAGE-GRPO's tuned lr against the three baselines at their
    # tuned fair settings (one trust region, KL to the initial policy), on the test seeds (suites/main_table.yaml).
    Claim("table2_B", "Table 2, Setting B: SAGE-GRPO with dual KL is the best method", "main_table",
          (Beats(row={"method": "sage_grpo", "kl": "dual"}, versus=BASELINES, within={"setting": "B"},
                 split=("reward",)),), tested_by="suites/main_table.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("table1_noise", "Table 1: SAGE's SDE has less excess noise than FlowGRPO's first-order SDE", "samplers",
          (Samplers(kernel="sage", than="flow"),), tested_by="grpo-bench samplers"),
    Claim("equalizer", "The equalizer shrinks the per-step gradient spread from over 10× to a small constant and "
          "helps every SDE", "ablate_equalizer",
          (Spread(row={"equalizer": False}, bound=10.0, below=False, quantifier="some"),
           Spread(row={"equalizer": True}, bound=2.0, below=True),
           Beats(row={"equalizer": True}, versus=({"equalizer": False},), split=("method",))),
          tested_by="suites/ablate_equalizer.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("dual_kl", "Dual moving KL beats none / fixed / step-wise / moving KL", "ablate_kl",
          (Beats(row={"kl": "dual", "stepwise_ref": "rollout"},
                 versus=({"kl": "none"}, {"kl": "fixed"}, {"kl": "stepwise", "stepwise_ref": "rollout"},
                         {"kl": "moving"})),), tested_by="suites/ablate_kl.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    # The paper's schedule is its own row (kl_feedback: ziegler); the project's proportional controller is another,
    # labelled row of the suite, not the claim's.
    Claim("kl_weight", "The two-stage KL weight beats fixed weights and a milder schedule", "kl_weight",
          (Beats(row={"kl_adaptive": True, "kl_feedback": "ziegler"},
                 versus=({"kl_adaptive": False}, {"kl_beta_min": 0.003, "kl_beta_max": 0.03})),),
          tested_by="suites/kl_weight.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("hacking", "Without a KL term the reward is hacked (the judge rises while the true quality falls)",
          "ablate_kl",
          (Moves(row={"kl": "none"}, metric="Judge", direction=+1),
           Moves(row={"kl": "none"}, metric="Oracle", direction=-1)), tested_by="suites/ablate_kl.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("user_study", "User study: raters prefer SAGE-GRPO over each baseline", "main_table",
          (WinRates(target="sage_grpo"),), tested_by="grpo-bench study export runs/main_table"),
    # Speed claims of the field's papers, each at equal quality on training compute (sample-step passes:
    # docs/statistics.md "Compute"), per setting and reward track of the field suite.
    Claim("mixgrpo_speed", "MixGRPO: DanceGRPO's quality in about half of DanceGRPO's training time", "field",
          (Faster(row={"method": "mix_grpo", **AS_SHIPPED}, versus={"method": "dance_grpo", **AS_SHIPPED},
                  fraction=0.5,
                  tested_by="suites/field.yaml", split=("setting", "reward")),), tested_by="suites/field.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("flow_grpo_fast_speed", "Flow-GRPO-Fast: FlowGRPO's reward training 1–2 steps instead of 10, at less "
          "compute", "field",
          (Faster(row={"method": "flow_grpo_fast", **AS_SHIPPED}, versus={"method": "flow_grpo", **AS_SHIPPED},
                  fraction=1.0,
                  tested_by="suites/field.yaml", split=("setting", "reward")),), tested_by="suites/field.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
    Claim("diffusion_nft_speed", "DiffusionNFT: FlowGRPO's quality with several times (here: 3×) less training "
          "compute", "field",
          (Faster(row={"method": "diffusion_nft", **AS_SHIPPED}, versus={"method": "flow_grpo", **AS_SHIPPED},
                  fraction=1 / 3,
                  tested_by="suites/field.yaml", split=("setting", "reward")),), tested_by="suites/field.yaml",
          as_named=TUNED_ON_TEST_SEEDS),
)
"""The ledger's rows, in the paper's order."""
