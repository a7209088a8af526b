"""KIT/analysis/: table3.{md,csv,tex}, table3.png and summary.json from analysis.analyze()."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.atomic import atomic_write_json, atomic_write_text
from grpo_bench.report.tables import latex, markdown
from grpo_bench.study.kit import ANALYSIS, DIMENSIONS

SHORT = {"vq": "VQ", "mq": "MQ", "ta": "TA"}


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _cell(r: dict[str, Any]) -> str:
    if not r.get("votes"):
        return "–"
    if not (math.isfinite(r["ci_low"]) and math.isfinite(r["ci_high"])):  # one rater or one prompt: no interval
        one = "1 rater" if r.get("raters", 0) < 2 else "1 prompt"
        return f"{_pct(r['rate'])} [n/a ({one})]"
    return f"{_pct(r['rate'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"


def _line(title: str, per_dim: dict[str, dict[str, Any]], what: str) -> str:
    parts = [f"{SHORT[d]} {_cell(r)} ({r.get('votes', 0)} {what})" for d, r in per_dim.items()]
    return f"- {title}: " + "; ".join(parts)


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What ``study analyze`` prints: the raters it kept and each baseline's win rates, one line each."""
    r = result["raters"]
    lines = [f"{result['target']} (setting {result.get('setting')}): {r['kept']} of {r['total']} raters kept "
             f"({r['excluded']} excluded by attention checks); win rate, a tie counting half, 95% interval:"]
    by_base: dict[str, dict[str, dict[str, Any]]] = {}
    for row in result["win_rates"]:
        by_base.setdefault(row["baseline"], {})[row["dimension"]] = row
    for base, dims in by_base.items():
        votes = max(int(d.get("votes") or 0) for d in dims.values())
        lines.append(f"  vs {base}: " + ", ".join(f"{SHORT[d]} {_cell(dims[d])}" for d in DIMENSIONS if d in dims)
                     + f" ({votes} votes per dimension)")
    return lines


def write(root: str | Path, result: dict[str, Any]) -> Path:
    out = Path(root) / ANALYSIS
    out.mkdir(parents=True, exist_ok=True)
    wr = pd.DataFrame(result["win_rates"])
    wr.insert(0, "target", result["target"])
    atomic_write_text(out / "table3.csv", wr.to_csv(index=False))
    headers = ["Baseline", *[f"{DIMENSIONS[d]} win" for d in DIMENSIONS], "votes/dim"]
    rows = []
    for base, part in wr.groupby("baseline", sort=False):
        by_dim = {r["dimension"]: r for r in part.to_dict(orient="records")}
        rows.append([base, *[_cell(by_dim[d]) for d in DIMENSIONS], str(int(part["votes"].max()))])
    table = markdown(headers, rows, "lrrrr")
    atomic_write_text(out / "table3.tex", latex(headers, rows, "lrrrr"))
    r = result["raters"]
    lines = [
        f"# Table 3 — human preference: {result['target']} against each baseline", "",
        (f"Win rate of **{result['target']}** (setting {result.get('setting')}); {result['ties']}. "
        "95% percentile intervals from a bootstrap that resamples raters and prompts together."), "",
        table,
        (f"- raters: {r['kept']} kept, {r['excluded']} excluded by attention checks "
        f"(kept: at least {r['min_attention']:.0%} of their checks passed), {r['total']} in all"),
        "- Bradley–Terry log-strengths (mean 0): " + "; ".join(
            f"{SHORT[d]} " + (", ".join(f"{k} {v:+.2f}" for k, v in bt.items()) or "–")
            for d, bt in result["bradley_terry"].items()),
        "- Krippendorff's alpha (ordinal, main pairs): " + ", ".join(
            f"{SHORT[d]} {a:.2f}" if math.isfinite(a)
            else f"{SHORT[d]} – ({result.get('alpha_gap', {}).get(d) or 'not defined'})"
            for d, a in result["alpha"].items()),
        _line("position bias, share of non-tie votes for the LEFT clip (0.5 = none)", result["position_left"], "votes"),
        "- consistency on repeated pairs (same answer twice): " + ", ".join(
            f"{SHORT[d]} {_pct(c['rate'])} ({c['repeats']})" for d, c in result["consistency"].items()),
    ]
    if result["oracle_agreement"]:
        lines.append(_line("humans agree with the world oracle (non-tie votes)", result["oracle_agreement"], "votes"))
        lines.append(_line("humans agree with the judge's composite reward", result["judge_agreement"], "votes"))
    atomic_write_text(out / "table3.md", "\n".join(lines) + "\n\n![win rates](table3.png)\n")
    atomic_write_json(out / "summary.json", result)
    _figure(wr, result["target"], out / "table3.png")
    return out / "table3.md"


def _figure(wr: pd.DataFrame, target: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    bases = list(dict.fromkeys(wr["baseline"]))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(bases), 3.2))
    width = 0.8 / len(DIMENSIONS)
    for k, dim in enumerate(DIMENSIONS):
        part = wr[wr["dimension"] == dim].set_index("baseline").reindex(bases)
        x = np.arange(len(bases)) + (k - 1) * width
        err = np.nan_to_num(np.vstack([part["rate"] - part["ci_low"], part["ci_high"] - part["rate"]])).clip(min=0)
        ax.bar(x, part["rate"], width, yerr=err, capsize=3, label=SHORT[dim])
    ax.axhline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(bases)), bases, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{target} win rate")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
