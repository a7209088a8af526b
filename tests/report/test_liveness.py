"""The liveness table names every mechanism that never moved in a row's logged metrics, and only those."""


from liveness_support import UPDATES, liveness_results

from grpo_bench.report.liveness import findings
from grpo_bench.report.parts import TABLES, Context

INERT = {"kl": "stepwise", "metrics": {
    "ratio_mean": [1.0] * UPDATES, "clip_frac": [0.0] * UPDATES, "kl": [0.0] * UPDATES,
    # warm-up to the ceiling, then halved down to the floor (1e-3) and stuck there for the last 6 updates
    "kl_weight": [0.01, 0.05, 0.1, 0.05, 0.02, 0.002] + [1e-3] * 6,
}}
LIVE = {"kl": "dual", "metrics": {
    "ratio_mean": [1.0, 1.002, 0.998] * 4, "clip_frac": [0.0, 0.1, 0.05] * 4, "kl": [1e-4, 3e-4, 2e-4] * 4,
    "kl_stepwise": [0.0, 1e-5, 2e-5] * 4, "kl_weight": [0.01, 0.02, 0.04, 0.02, 0.01, 0.005] + [1e-3, 2e-3] * 3,
}}


def test_inert_mechanisms_are_named_and_live_ones_are_not(tmp_path):
    found = findings(liveness_results({"sage_grpo kl=stepwise": INERT, "sage_grpo kl=dual": LIVE}))
    inert = found[found["group"] == "sage_grpo kl=stepwise"]
    assert set(inert["mechanism"]) == {"PPO ratio", "PPO clip", "KL penalty", "adaptive KL weight"}
    weight = inert.loc[inert["mechanism"] == "adaptive KL weight", "finding"].iloc[0]
    assert "2 of 2 cells" in weight and "from update 6" in weight
    assert found[found["group"] == "sage_grpo kl=dual"].empty  # everything moved, the weight left its floor
    sections = TABLES.get("liveness")(Context(liveness_results({"sage_grpo kl=dual": LIVE}), tmp_path, {}))
    assert "Every logged mechanism acted" in sections[0].body


def test_a_kl_of_zero_is_not_a_finding_for_rows_without_a_trust_region():
    none = {"kl": "none", "metrics": {"ratio_mean": [1.0, 1.01] * 6, "clip_frac": [0.0, 0.2] * 6,
                                      "kl": [0.0] * UPDATES}}
    assert findings(liveness_results({"dance_grpo kl=none": none})).empty


def test_a_weight_pinned_at_its_ceiling_is_a_finding():
    ceiling = {"kl": "fixed", "metrics": {
        "ratio_mean": [1.0, 1.01] * 6, "clip_frac": [0.0, 0.2] * 6, "kl": [1e-4] * UPDATES,
        "kl_weight": [0.01, 0.05] + [0.1] * 10,  # beta_max 0.1 from update 2 on
    }}
    df = liveness_results({"flow_grpo kl=fixed": ceiling})
    df["text"] = df["text"].map(lambda t: t if not isinstance(t, str) else t.replace(
        '"kl_beta_min": 0.001', '"kl_beta_max": 0.1, "kl_beta_min": 0.001'))
    found = findings(df)
    assert list(found["finding"]) == ["2 of 2 cells stuck at its ceiling kl_beta_max from update 2 to the end"]


def test_updates_that_do_not_land_are_a_finding():
    live = {"kl": "dual", "metrics": {**LIVE["metrics"], "weights_changed": [0.999, 1.0] * 6}}
    rounded = {"kl": "dual", "metrics": {**LIVE["metrics"], "weights_changed": [0.04, 0.02] * 6}}
    found = findings(liveness_results({"sage_grpo fp32": live, "sage_grpo bf16": rounded}))
    assert list(found["group"]) == ["sage_grpo bf16"] and list(found["mechanism"]) == ["weight updates"]
    assert "3.0%" in found["finding"].iloc[0]  # the median of 0.04 and 0.02


def test_a_mechanism_the_recipe_makes_inert_is_said_to_be_so():
    """One optimizer step per rollout (SAGE-GRPO's official schedule): ratio 1, no clip, step-wise KL 0 by design."""
    official = {"kl": "dual", "config": {"minibatches": 1, "inner_epochs": 1, "step_every": "minibatch"},
                "metrics": {"ratio_mean": [1.0] * UPDATES, "clip_frac": [0.0] * UPDATES, "kl": [1e-4] * UPDATES,
                            "kl_stepwise": [0.0] * UPDATES, "kl_weight": [0.01, 0.02] * 6}}
    two = {**official, "config": {"minibatches": 2}}
    found = findings(liveness_results({"sage_grpo official": official, "sage_grpo two": two}))
    by_recipe = found[found["group"] == "sage_grpo official"]
    assert set(by_recipe["mechanism"]) == {"PPO ratio", "PPO clip", "step-wise KL"}
    assert all("inert by the recipe" in f for f in by_recipe["finding"])
    assert not any("inert by the recipe" in f for f in found.loc[found["group"] == "sage_grpo two", "finding"])


def test_no_op_updates_are_counted():
    """weights_changed 0 (nothing changed) and NaN (no gradient arrived) are both counted per row."""
    noop = {"kl": "dual", "metrics": {**LIVE["metrics"], "weights_changed": [1.0] * 9 + [0.0, float("nan"), 0.0]}}
    found = findings(liveness_results({"sage_grpo noop": noop}))
    assert list(found["mechanism"]) == ["weight updates"]
    assert "6 of 24 updates were no-ops: 4 changed no weight" in found["finding"].iloc[0]
    assert "2 received no gradient" in found["finding"].iloc[0]


def test_a_clip_that_never_fired_says_how_far_the_ratio_moved_against_its_range():
    """CPS in the tuned main table: its unscaled log-prob at lr 1e-5 moves the ratio ~4e-6, its clip range is 1e-4."""
    small = {"kl": "fixed", "config": {"clip_range": 1e-4}, "metrics": {
        "ratio_mean": [1.0, 1.000004, 0.999997] * 4, "clip_frac": [0.0] * UPDATES, "kl": [1e-4] * UPDATES,
        "kl_weight": [0.01, 0.02] * 6}}
    found = findings(liveness_results({"cps kl=fixed": small}))
    clip = found.loc[found["mechanism"] == "PPO clip", "finding"].iloc[0]
    assert "within 4e-06 of 1" in clip and "25× inside the clip range 0.0001" in clip
    assert "inert by the recipe" not in clip


def test_a_likelihood_free_method_has_no_ratio_and_says_so_once():
    """DiffusionNFT logs ratio 1 and clip 0 because its loss has no log-prob: one 'absent by the method' line,
    not a schedule fault; the same metrics on a policy-gradient method stay a PPO finding."""
    flat = {"kl": "none", "metrics": {"ratio_mean": [1.0] * UPDATES, "clip_frac": [0.0] * UPDATES}}
    found = findings(liveness_results({"diffusion_nft kl=none": flat, "flow_grpo kl=none": flat}))
    nft = found[found["group"] == "diffusion_nft kl=none"]
    assert list(nft["mechanism"]) == ["PPO ratio and clip"] and "computes no log-prob" in nft["finding"].iloc[0]
    flow = found[found["group"] == "flow_grpo kl=none"]
    assert set(flow["mechanism"]) == {"PPO ratio", "PPO clip"}
