"""How much a table can tell: checked against hand computations and simulation, not the formulas."""

import math

import numpy as np
import pytest
from scipy import stats

from grpo_bench.report.power import (
    equivalent,
    eval_noise_variance,
    holm,
    look_levels,
    mde,
    seeds_needed,
    spending,
    t_power,
    tost_half_width,
)
from grpo_bench.report.stats import cluster_bootstrap


def test_holm_matches_a_hand_worked_family():
    # sorted: 0.01*3 = 0.03; 0.03*2 = 0.06; 0.04*1 = 0.04 -> running max 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    out = holm([0.2, float("nan"), 0.9])
    assert math.isnan(out[1]) and out[0] == pytest.approx(0.4) and out[2] == pytest.approx(0.9)
    assert holm([0.6, 0.7]).max() <= 1.0


def test_t_power_is_alpha_at_zero_and_matches_simulated_paired_t_tests():
    assert t_power(0.0, 1.0, 6) == pytest.approx(0.05, abs=1e-9)
    rng = np.random.default_rng(0)
    n, effect, sd, trials = 5, 0.8, 1.0, 40_000
    diffs = rng.normal(effect, sd, size=(trials, n))
    rejected = stats.ttest_1samp(diffs, 0.0, axis=1).pvalue < 0.05
    assert t_power(effect, sd, n) == pytest.approx(rejected.mean(), abs=0.01)


def _simulated_power(effect: float, n: int, trials: int, rng: np.random.Generator) -> float:
    """Share of simulated paired t-tests (n seeds, per-seed SD 1, true mean `effect`) rejecting at 5%."""
    d = rng.normal(effect, 1.0, size=(trials, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float((np.abs(t) > stats.t.ppf(0.975, n - 1)).mean())


@pytest.mark.parametrize("n, nc", [(2, 8.0), (2, 12.0), (2, 2.0), (3, 4.0), (6, 2.5), (12, 1.0)])
def test_t_power_matches_simulation_where_scipy_loses_the_lower_tail(n, nc):
    # df 1 with noncentrality 8 and 12: scipy's nct.cdf(-crit) is NaN there and t_power once read 1.0;
    # a test with two seeds rejects only about half the time (0.47 and 0.65).
    effect = nc / math.sqrt(n)  # noncentrality = effect / (sd / sqrt(n)) with sd 1
    trials = 100_000
    simulated = _simulated_power(effect, n, trials, np.random.default_rng(1000 + n * 100 + int(nc * 10)))
    se = math.sqrt(simulated * (1 - simulated) / trials)
    assert t_power(effect, 1.0, n) == pytest.approx(simulated, abs=max(5 * se, 1e-3))
    assert 0.0 <= t_power(effect, 1.0, n) <= 1.0


def test_t_power_is_below_one_at_two_seeds_and_seeds_needed_sees_it():
    assert math.isnan(stats.nct.cdf(-stats.t.ppf(0.975, 1), 1, 8.0))  # the scipy behaviour this guards against
    assert t_power(8 / math.sqrt(2), 1.0, 2) == pytest.approx(0.470, abs=0.002)
    assert t_power(12 / math.sqrt(2), 1.0, 2) == pytest.approx(0.654, abs=0.002)
    # effect 6 SD: two seeds reject with probability 0.49 only, three with 0.995
    assert seeds_needed(6.0, 1.0) == 3
    # power rises with the effect at two seeds (it was 1.0 wherever the lower tail was NaN)
    powers = [t_power(e, 1.0, 2) for e in np.linspace(0.5, 60, 40)]
    assert all(b >= a - 1e-12 for a, b in zip(powers, powers[1:])) and powers[-1] < 1.0


def test_mde_has_the_stated_power_and_approaches_the_normal_formula():
    sd = 0.13
    for n in (3, 10):
        d = mde(sd, n)
        assert t_power(d, sd, n) == pytest.approx(0.8, abs=1e-6)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # large-n normal approximation
    assert mde(sd, 2000) == pytest.approx(z * sd / math.sqrt(2000), rel=2e-3)
    assert math.isnan(mde(sd, 1)) and math.isnan(mde(0.0, 5))


def test_seeds_needed_is_the_first_n_with_the_power():
    for effect, sd in [(0.05, 0.13), (0.5, 1.0), (0.09, 0.10)]:
        n = seeds_needed(effect, sd)
        assert t_power(effect, sd, n) >= 0.8 > t_power(effect, sd, n - 1)
    assert seeds_needed(0.0, 1.0) is None
    assert seeds_needed(1e-6, 1.0, max_seeds=1000) is None


def test_seed_bootstrap_with_one_observation_per_cluster_is_the_plain_bootstrap():
    x = np.random.default_rng(1).normal(size=30)
    est, lo, hi = cluster_bootstrap(x, [np.arange(30)], n_boot=4000)
    se = x.std(ddof=1) / math.sqrt(30)
    assert est == pytest.approx(x.mean())
    assert (hi - lo) / 2 == pytest.approx(1.96 * se, rel=0.15)


def test_seed_bootstrap_respects_the_design_effect():
    # 6 seeds x 8 videos; all videos of a seed identical (intra-class correlation 1): the interval
    # must be as wide as the one of the 6 seed means, i.e. sqrt(8) times the naive one.
    means = np.random.default_rng(2).normal(size=6)
    values, seeds = np.repeat(means, 8), np.repeat(np.arange(6), 8)
    _, lo_c, hi_c = cluster_bootstrap(values, [seeds], n_boot=4000)
    _, lo_s, hi_s = cluster_bootstrap(means, [np.arange(6)], n_boot=4000)
    _, lo_n, hi_n = cluster_bootstrap(values, [np.arange(48)], n_boot=4000)
    assert hi_c - lo_c == pytest.approx(hi_s - lo_s, rel=0.1)
    assert (hi_c - lo_c) / (hi_n - lo_n) == pytest.approx(math.sqrt(8), rel=0.25)


def test_seed_bootstrap_covers_the_truth_on_clustered_data():
    rng = np.random.default_rng(3)
    hits, trials = 0, 150
    for t in range(trials):
        cluster_effects = rng.normal(0.0, 1.0, size=12)
        values = np.repeat(cluster_effects, 5) + rng.normal(0, 0.5, size=60)
        _, lo, hi = cluster_bootstrap(values, [np.repeat(np.arange(12), 5)], n_boot=500, seed=t)
        hits += lo <= 0.0 <= hi
    # percentile bootstrap with 12 clusters under-covers a little; far below 0.95 would mean the
    # clustering is ignored (the naive interval covers ~0.55 here).
    assert 0.85 <= hits / trials <= 0.99


def test_alpha_spending_spends_everything_at_the_last_look_and_little_early():
    assert spending(1.0) == pytest.approx(0.05)
    assert spending(0.25) < spending(0.5) < spending(1.0)
    assert spending(0.25) < 0.001  # O'Brien-Fleming: early looks need overwhelming evidence
    levels = look_levels([5, 10, 15, 20], max_seeds=20)
    assert sum(levels) == pytest.approx(0.05)
    assert all(b >= a for a, b in zip(levels, levels[1:]))
    with pytest.raises(ValueError):
        spending(0.0)


def test_equivalence_is_tost_at_five_percent_the_ninety_percent_interval():
    d = np.array([0.010, 0.030, -0.005, 0.020, 0.012])
    margin = 0.028  # 90%: |mean| + half = 0.0258; 95%: 0.0295
    t90, t95 = tost_half_width(d), stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert t90 == pytest.approx(stats.t.ppf(0.95, 4) * d.std(ddof=1) / math.sqrt(5))
    # the two one-sided tests, each at 5%: mean > -margin and mean < +margin
    p_low = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    p_high = stats.ttest_1samp(d, margin, alternative="less").pvalue
    assert max(p_low, p_high) < 0.05 and equivalent(d, margin)
    assert abs(d.mean()) + t95 > margin  # the 95% interval would not have called it equivalent
    assert not equivalent(d, abs(d.mean()) + t90 * 0.99)  # just too wide
    assert equivalent([0.01, 0.01, 0.01], 0.05) and not equivalent([0.06, 0.06], 0.05)
    assert not equivalent([0.0], 0.05) and not equivalent([0.0, 0.0], 0.0)


def test_eval_noise_variance_is_the_pooled_within_prompt_variance_over_the_videos():
    # two prompts x two samples: within-prompt deviations ±0.1 and ±0.3; the prompt means (0, 1) do not count
    d = [-0.1, 0.1, 0.7, 1.3]
    pooled = (0.1**2 * 2 + 0.3**2 * 2) / 2  # sum of squares / (n_p - 1 summed)
    assert eval_noise_variance(d, ["a", "a", "b", "b"]) == pytest.approx(pooled / 4)
    assert math.isnan(eval_noise_variance([0.1, 0.2], ["a", "b"]))  # no prompt with two videos
    assert eval_noise_variance([0.5, 0.5, 0.2, 0.2], ["a", "a", "b", "b"]) == 0.0


def test_eval_noise_variance_recovers_the_share_of_a_simulated_design():
    # per seed: a training effect (sd 0.05) shared by its 8 prompts x 2 samples, fixed prompt effects, and
    # per-video noise (sd 0.2): eval-noise variance of the seed mean 0.04 / 16 = 0.0025, share 0.0025 / 0.005
    rng = np.random.default_rng(7)
    prompts = np.repeat(np.arange(8), 2)
    prompt_effect = rng.normal(0, 0.3, size=8)[prompts]
    seeds = 400
    means, noise = [], []
    for _ in range(seeds):
        d = rng.normal(0, 0.05) + prompt_effect + rng.normal(0, 0.2, size=16)
        means.append(d.mean())
        noise.append(eval_noise_variance(d, prompts))
    assert np.mean(noise) == pytest.approx(0.0025, rel=0.05)
    assert np.mean(noise) / np.var(means, ddof=1) == pytest.approx(0.5, abs=0.08)


def test_the_quadrature_fallback_agrees_with_scipy_where_scipy_answers():
    from grpo_bench.report.power import _tail

    for df, nc in [(1, 1.0), (1, 6.0), (2, 3.0), (5, 0.5), (30, 4.0), (1000, 40.0)]:
        crit = stats.t.ppf(0.975, df)
        assert _tail(crit, df, nc, upper=True) == pytest.approx(stats.nct.sf(crit, df, nc), abs=1e-8)
        lower = stats.nct.cdf(-crit, df, nc)
        if math.isfinite(lower):
            assert _tail(crit, df, nc, upper=False) == pytest.approx(lower, abs=1e-8)
    # where scipy's lower tail is NaN it is below Phi(-nc), and the quadrature respects the bound
    crit = stats.t.ppf(0.975, 1)
    assert 0.0 <= _tail(crit, 1, 8.0, upper=False) <= stats.norm.cdf(-8.0)
