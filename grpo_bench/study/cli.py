"""``grpo-bench study export|serve|analyze``: the typer sub-app (registered in grpo_bench.cli)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

study_app = typer.Typer(
    help="Blind human-preference study (Table 3): export a kit, serve it to raters, analyse the votes.",
                        no_args_is_help=True)
console = Console()


@study_app.command("export")
def export(
    run_dir: Path = typer.Argument(..., help="A finished suite's run folder (runs/<suite>)."),
    out: Path | None = typer.Option(None, "--out", help="Kit folder to create (default: RUN_DIR/study)."),
    target: str | None = typer.Option(None, "--target", help="Row label as in Table 2 (default: the last row)."),
    baselines: list[str] | None = typer.Option(
        None, "--baselines", help="Baseline row (repeat the flag; default: every other row)."),
    setting: str | None = typer.Option(None, "--setting", help="Reward setting (needed when the suite has several)."),
    pairs: int = typer.Option(
        32, "--pairs", help="Pairs of each baseline one rater sees, each on a target video of its own."),
    raters: int = typer.Option(
        29, "--raters", help="Raters the study plans; they are split over one block of pairs per baseline."),
    checks: int = typer.Option(2, "--checks", help="Attention checks of each kind (identical clips; a broken clip)."),
    repeats: int = typer.Option(4, "--repeats", help="Pairs shown twice, to measure rater consistency."),
    fps: int = typer.Option(8, "--fps", help="Frames per second of the clips."),
    seed: int = typer.Option(0, "--seed", help="Seed of the pair selection and the checks."),
) -> None:
    """Write KIT/clips/*.mp4, pairs.json (what raters see) and key.json (what they must not)."""
    from grpo_bench.study.export import ExportOptions, export_kit

    opts = ExportOptions(target=target, baselines=baselines or None, setting=setting, pairs=pairs,
                         raters=raters, checks=checks, repeats=repeats, seed=seed, fps=fps)
    summary = export_kit(run_dir, out or run_dir / "study", opts)
    d = summary["design"]
    console.print(f"kit {summary['kit']}: {summary['target']} against {', '.join(summary['baselines'])}; "
                  f"{d['blocks']} block(s) of raters, each rater sees {d['pairs_per_baseline_per_rater']} pair(s) per "
                  f"baseline ({d['target_videos_per_rater']} target videos, each once), "
                  f"{summary['repeat'] // d['blocks']} repeated, {summary['identical'] + summary['broken']} attention "
                  f"checks; {summary['main']} main pairs and {summary['clips']} clips in the kit",
                  highlight=False, soft_wrap=True)
    if d["shortfall"]:
        console.print(f"[yellow]{d['pairs_per_baseline_per_rater']} pair(s) per baseline, not {opts.pairs}:[/] "
                      f"{d['shortfall']}", highlight=False, soft_wrap=True)
    console.print(f"power: {d['power']}", highlight=False, soft_wrap=True)


@study_app.command("serve")
def serve(
    kit: Path = typer.Argument(..., help="Kit folder (from `study export`)."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind; keep the default behind a reverse proxy (docs/human_study.md)."),
    port: int = typer.Option(8765, "--port", help="TCP port."),
) -> None:
    """Serve the rating page; votes go to KIT/votes.sqlite."""
    from grpo_bench.study.server import serve as run_server

    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning:[/] binding {host}: raters reach the page without TLS or a login; "
                      "docs/human_study.md shows how to put it behind a reverse proxy", highlight=False)
    run_server(kit, host=host, port=port)


@study_app.command("analyze")
def analyze(
    kit: Path = typer.Argument(..., help="Kit folder with votes.sqlite."),
    min_attention: float = typer.Option(
        0.75, "--min-attention", help="Share of attention checks a rater must pass to count."),
    n_boot: int = typer.Option(2000, "--n-boot", help="Bootstrap resamples."),
) -> None:
    """Win rates with rater- and prompt-clustered intervals, Bradley-Terry, alpha, biases -> KIT/analysis/."""
    from grpo_bench.errors import UserError
    from grpo_bench.extras import require

    require("krippendorff", "study analyze")  # before any work, not at the alpha of the last table
    from grpo_bench.study import table3
    from grpo_bench.study.analysis import AnalyzeOptions
    from grpo_bench.study.analysis import analyze as run_analysis

    if not 0 <= min_attention <= 1 or n_boot < 100:
        raise UserError("--min-attention must be in [0, 1] and --n-boot at least 100")
    result = run_analysis(kit, AnalyzeOptions(min_attention=min_attention, n_boot=n_boot))
    path = table3.write(kit, result)
    for line in table3.summary_lines(result):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    console.print(f"wrote {path} (with Bradley-Terry, alpha, position bias, consistency) and {path.parent}/",
                  highlight=False, soft_wrap=True, markup=False)
