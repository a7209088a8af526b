"""The GRPO loop on accelerate (docs/design.md §3–4, §7): one loop hosts every method.

A run is a sequence of phases, each returning a small typed result:
  build      ``Trainer.__init__``: model, reward, launch (``steppers.py``), method, KL, anchors, once;
             the phases' inputs (``RolloutPolicy``, ``GroupSpec``, ``Shard``, ``LossContext``,
             ``Passes``) and the mutable ``TrainState`` (state.py) that checkpoints save and load;
  collect    ``collect.py`` -> ``RolloutBatch``: prompts and initial noise from (seed, u) alone (every
             method sees the same ones), rollout of P × G trajectories, rewards, group advantages;
  optimise   ``optimize.py`` -> ``StepGradNorms`` (diagnostic updates: measured per-step gradient
             norms before any step) and ``OptimizeStats`` (``inner_epochs`` × ``minibatches``
             optimizer steps; the moving anchor follows them);
  evaluate   ``evaluation.py`` -> ``EvalResult``: ODE, fixed noise, at u = 0, every ``eval_every``
             and after the last update;
  checkpoint one metrics line per update (names: ``metrics.py``); a checkpoint every
             ``checkpoint_every`` updates (``checkpoint.py``).

Run directory: config.yaml (resolved), metrics.jsonl, checkpoints/, samples/final_eval.pt,
final.json and DONE (last). Every write is atomic.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml

from grpo_bench import interrupt, safe_yaml
from grpo_bench.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from grpo_bench.config import metrics as m
from grpo_bench.config import recipe, weights
from grpo_bench.config.identity import cell_id
from grpo_bench.config.metrics import TIMES as TIMES  # re-exported: the time_* keys tests leave out
from grpo_bench.config.prompts import load_prompt_set
from grpo_bench.config.run import (
    Compared,
    KLWeighting,
    RunConfig,
    TrustRegion,
    resolve,
    section,
    validate,
)
from grpo_bench.config.sections import Cadence
from grpo_bench.core import schedule
from grpo_bench.core.anchors import Anchors, make_anchor_policy
from grpo_bench.core.kl_weight import make_kl_weight
from grpo_bench.core.loss import LossContext
from grpo_bench.core.method import make_method
from grpo_bench.core.rollout import StepTable
from grpo_bench.core.sde import equalizer
from grpo_bench.core.trust_region import make_kl
from grpo_bench.errors import UserError
from grpo_bench.train import (
    base_eval,
    checkpoint,
    cpu_heap,
    distributed,
    export,
    landing,
    precision,
    sharding,
    steppers,
)
from grpo_bench.train.collect import GroupSpec, RolloutPolicy, Shard, collect
from grpo_bench.train.evaluation import EvalOptions, EvalResult, evaluate
from grpo_bench.train.microbatch import MicroBatched, chunked
from grpo_bench.train.optimize import Passes, measure_step_grad_norms, optimize
from grpo_bench.train.state import TrainState
from grpo_bench.train.tracking import MetricsSink, hparams

Progress = Callable[[int, int, dict], None]


def _device_is_cpu(device: str) -> bool:
    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())


class Trainer:
    """Everything one run needs, built once; ``update(u)`` does one GRPO iteration."""

    def __init__(self, cfg: RunConfig, out_dir: Path, model: Any = None, reward: Any = None) -> None:
        import os

        from accelerate import Accelerator

        # before any weight is loaded: sequence-parallel groups of the processes, then the data-parallel schedule
        dp_world = distributed.check_sequence_parallel(cfg.sequence_parallel, int(os.environ.get("WORLD_SIZE", "1")),
                                                       cfg.model)
        recipe.check(section(cfg, recipe.UpdateShape), dp_world)
        # The update-0 eval is shared between the cells of a suite folder (base_eval.py), and only when the
        # config names the whole base policy and reward (an object passed in is not part of the key).
        in_suite = (Path(out_dir).parent / "suite.yaml").is_file()
        self.share_base_eval = model is None and reward is None and in_suite
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if _device_is_cpu(cfg.device):  # freed activations stay in the heap: no page faults per forward
            cpu_heap.keep_freed_memory()
        if cfg.device.startswith("cuda:"):
            torch.cuda.set_device(torch.device(cfg.device))
        if model is None:
            from grpo_bench import models

            model = models.from_section(section(cfg, models.ModelSection))  # all a factory reads of the run
        self.precision = precision.resolve(cfg.mixed_precision, model.bf16_by_default,
                                           _device_is_cpu(cfg.device))
        cfg = dataclasses.replace(cfg, mixed_precision=self.precision)  # 'auto' resolved for every component
        self.cfg, self.out_dir = cfg, Path(out_dir)
        steppers.check_launch(cfg.mixed_precision)
        launch = steppers.accelerator_kwargs(cfg.mixed_precision, _device_is_cpu(cfg.device))
        steppers.allow_precision(launch["mixed_precision"])
        self.acc = Accelerator(**launch,
                               log_with=cfg.trackers or None, project_dir=str(self.out_dir))
        self.device = self.acc.device
        # the data-parallel bookkeeping: one rank per sequence-parallel group (distributed.py; acc when sp = 1)
        self.dp = distributed.data_parallel(self.acc, cfg.sequence_parallel)
        experiment = section(cfg, Compared)
        if reward is None:
            from grpo_bench import rewards

            # on the device where it is sampled
            reward = rewards.load(cfg.reward, device=str(self.device), **weights.reward_kwargs(experiment))
        weights.check_video_shape(experiment, model, reward)  # before any sampling
        self.model, self.reward = model, reward
        prompt_set = load_prompt_set(cfg.prompts)
        # Encode every prompt once, then take the text encoders off the accelerator (no-ops for the world).
        model.cache_prompts([*prompt_set.train, *prompt_set.eval])
        model.release_text_encoders()
        self.sampler = MicroBatched(model, cfg.micro_batch)  # rollout and eval: micro_batch rows per forward
        self.module = module = model.trainable_module()
        model.to(self.device)
        if cfg.sequence_parallel > 1:  # split every transformer forward over the group (a collective)
            if not model.supports_sequence_parallel:
                raise UserError(f"config key 'sequence_parallel' ({cfg.sequence_parallel}): model {cfg.model!r} "
                                "has no sequence-parallel path (Wan and HunyuanVideo 1.5 have); use 1")
            model.enable_sequence_parallel(cfg.sequence_parallel, self.device)
        # The launch's optimizer step (steppers.py): FSDP2 shards the module first, DeepSpeed wraps it
        # in its engine; every later reference to the parameters sees the final ones.
        self.stepper = steppers.make_stepper(self.acc, module, section(cfg, steppers.StepperOptions))
        self.sharded = sharding.is_sharded(self.stepper.params)
        self.params, self.autocast = self.stepper.params, self.stepper.autocast
        if (msg := landing.precision_warning(self.params, cfg.lr)) is not None:  # bf16 weights a step cannot move
            warnings.warn(msg, stacklevel=2)
        self.probe = landing.WeightProbe(self.params, self.dp, grads_visible=not self.stepper.engine_checkpoint)

        self.method = make_method(cfg.method, **cfg.method_overrides())
        self.sigmas = schedule.sigmas(cfg.steps, cfg.shift)
        self.table = StepTable.build(self.method, self.sigmas, self.device)
        self.stored = self.method.eligible_steps(self.sigmas).nonzero().flatten()  # Long[S]
        if self.stored.numel() == 0:
            raise UserError(f"method {cfg.method!r}: no trainable (stochastic) step with steps={cfg.steps}")
        weight = self._equalizer_weights(cfg.steps, cfg.equalizer_proxy)
        trust_region = section(cfg, TrustRegion)
        self.kl = make_kl(trust_region, kind=cfg.kl, params=cfg.params)  # built from its own section
        own = {a: make_anchor_policy(p, trust_region, self.method.anchor_params())
               for a, p in self.method.anchor_policies().items()}  # anchors the method's loss reads itself
        # The loss calls the model as the rollout does (micro_batch rows per call, the guidance halves counted):
        # the same batch composition gives the same bf16 rounding, so the ratio at a rollout's first step is 1
        self.ctx = LossContext(self.sampler, self.table, weight.to(self.device), self.kl,
                               self.method.config.clip_range, self.method.config.logprob, cfg.guidance,
                               objective=self.method.objective, family=self.method.loss_family,
                               method_params=self.method.params, method_anchors=tuple(own),
                               detach_uncond=cfg.detach_uncond, guidance_formula=cfg.guidance_formula,
                               objective_is_methods=self.method.own_objective)
        self.anchors = Anchors({**self.kl.anchor_policies(), **own}, model, module)
        self.ctx.live_anchors = {a: chunked(self.anchors.velocity(a), cfg.micro_batch) for a in self.anchors.live_names}
        # what changes between updates (checkpoint.save / load): optimizer and module, anchors, KL weight, counters
        self.state = TrainState(self.stepper, self.anchors, make_kl_weight(section(cfg, KLWeighting)))
        self.train_prompts = prompt_set.train
        rows = distributed.shard(cfg.prompts_per_update * cfg.group_size, self.dp.process_index,
                                 self.dp.num_processes)  # checks divisibility before any sampling
        self.shard = Shard(self.dp, rows)
        self.policy = RolloutPolicy(self.sampler, self.sigmas, self.table, self.stored, self.anchors,
                                    tuple(model.latent_shape), self.device, self.autocast)
        self.groups, self.passes = section(cfg, GroupSpec), section(cfg, Passes)  # the few values each phase reads

    def _equalizer_weights(self, steps: int, proxy: str) -> torch.Tensor:
        """S_i per step (ones without the equalizer): the proxy of the run's log-prob form, unless the config
        names the mismatched Gaussian proxy (resolved in config/run.py ``_equalizer_proxy``)."""
        if not self.method.config.equalizer:
            return torch.ones(steps)
        actual = self.method.config.logprob
        form = "gaussian" if proxy in ("gaussian", "mismatched_gaussian") else actual
        if form != actual:
            warnings.warn(f"equalizer: the mismatched Gaussian proxy lambda/std on the {actual!r} log-prob "
                          "(a labelled ablation row; 'auto' equalizes this form)", stacklevel=2)
        return equalizer(self.method.kernel, self.sigmas, form)

    # --- one update: collect -> diagnose -> optimise ----------------------------------------
    def update(self, u: int) -> dict[str, Any]:
        """One GRPO iteration; returns its metrics line (without the eval part)."""
        cfg = self.cfg
        # rollouts of update u's prompts, rewards, group advantages
        compute = self.state.compute  # counts every model pass where it is made (compute.py)
        batch = collect(self.policy, self.reward, self.method, self.train_prompts, cfg.seed, u, self.groups, self.shard,
                        compute)
        diag = measure_step_grad_norms(batch, self.ctx, self.params, cfg.steps, cfg.micro_batch, self.autocast,
                                       self.device, due=bool(cfg.diag_every) and u % cfg.diag_every == 0,
                                       compute=compute, group=self.model.sequence_parallel_group)
        stats = optimize(batch, self.ctx, self.state, self.passes, self.dp, self.probe)  # the optimizer steps
        compute.seconds += batch.time_rollout + batch.time_reward + stats.time_train
        return {
            m.UPDATE: u, **batch.metrics(), **diag.metrics(), **stats.metrics(),
            m.TIME_ROLLOUT: batch.time_rollout, m.TIME_REWARD: batch.time_reward,
            m.TIME_DIAG: diag.time_diag, m.TIME_TRAIN: stats.time_train,
        }

    def evaluate(self) -> EvalResult:
        """The current policy on the eval prompts (ODE, fixed noise)."""
        t = time.perf_counter()
        sampler = self.state.compute.view(self.sampler, m.COMPUTE_EVAL)  # its forwards counted (compute.py)
        metrics, rows, videos = evaluate(sampler, self.reward, self.sigmas, section(self.cfg, EvalOptions),
                                          self.device, self.autocast, acc=self.dp, even_only=self.sharded)
        return EvalResult(metrics, rows, videos, time_eval=time.perf_counter() - t)

    def base_evaluation(self) -> EvalResult:
        """The update-0 eval, shared with the other runs of this folder that evaluate the same base policy
        (base_eval.py): read when one of them stored it, else computed and stored."""
        if self.acc.num_processes > 1 or not self.share_base_eval:
            return self.evaluate()
        t, runs = time.perf_counter(), self.out_dir.parent
        k = self._base_eval_key()
        stored, cost = base_eval.load(runs, k), base_eval.cost(runs, k)
        if stored is not None and cost is not None:
            self.state.compute.add(m.COMPUTE_EVAL, cost)  # charged what it cost the cell that computed it
            return EvalResult(*stored, time_eval=time.perf_counter() - t)
        counted = self.state.compute.local[m.COMPUTE_EVAL]
        result = self.evaluate()
        base_eval.save(runs, k, result.metrics, result.videos_rows, result.videos,
                       cost=self.state.compute.local[m.COMPUTE_EVAL] - counted)
        return result

    def base_rows(self) -> list[dict[str, Any]]:
        """Per-video scores of the update-0 eval (empty when this run has none stored)."""
        if not self.share_base_eval:
            return []
        stored = base_eval.load(self.out_dir.parent, self._base_eval_key())
        return stored[1] if stored is not None else []

    def _base_eval_key(self) -> str:
        """The key of this run's update-0 eval (base_eval.py), of the config with its precision resolved."""
        return base_eval.key({k: getattr(self.cfg, k) for k in base_eval.READS}, torch.get_num_threads())

    # --- the run ----------------------------------------------------------------------------
    def run(self, resume: bool, progress: Progress | None) -> dict[str, Any]:
        cfg, out = self.cfg, self.out_dir
        main = self.acc.is_main_process
        sink = MetricsSink(out, self.acc) if main else None
        if self.acc.trackers == [] and cfg.trackers:
            self.acc.init_trackers(f"grpo-bench-{cell_id(cfg)}", config=hparams(cfg.to_dict()))
        if resume:
            checkpoint.resume(self.state, self.acc, out)  # safetensors + JSON only; an unreadable one falls back
        lines = sink.truncate(self.state.counters.update) if main else []
        start_wall, t_attempt = self.state.counters.wall_time, time.perf_counter()
        final_eval = None
        cadence = section(cfg, Cadence)
        for u in range(self.state.counters.update, cfg.updates):
            last = u == cfg.updates - 1
            pre_eval = cadence.evaluates_before(u)
            line = {}
            if pre_eval:  # the policy before update u (u = 0: the base model)
                before = self.base_evaluation() if u == 0 else self.evaluate()
                line = before.line(at=u)
                if u == 0 and main and cfg.save_videos:  # the base row of the report's sample strips
                    save_eval_videos(before.videos, out / "samples" / "base_eval.pt")
            line = {**self.update(u), **line}
            if last:  # the final policy
                final_eval = self.evaluate()
                line.update(final_eval.line(at=u + 1))
            line.update(self.state.compute.totals(self.dp))  # run totals of model passes (every rank calls it)
            self.state.counters.update = u + 1
            self.state.counters.wall_time = start_wall + time.perf_counter() - t_attempt
            if main:
                sink.log(line)
            lines.append(line)
            # Ctrl-C (grpo_bench.interrupt): stop here, at a checkpoint. One process only: the ranks of a
            # launch could see the flag at different updates, and saving is a collective.
            stopping = interrupt.requested() and not last and self.acc.num_processes == 1
            if (u + 1) % cfg.checkpoint_every == 0 or last or stopping:
                checkpoint.save(self.state, self.acc, out, u + 1)
            if progress is not None:
                progress(u + 1, cfg.updates, line)
            if stopping:
                raise interrupt.Interrupted(f"stopped after update {u + 1} of {cfg.updates} (checkpoint saved)")
        if final_eval is None:  # resumed after the last checkpoint: the same policy, the same noise
            final_eval = self.evaluate()
        rows, videos = final_eval.videos_rows, final_eval.videos
        # the exported policy of a sharded run: every rank all-gathers, before the process group ends
        gathered = export.gather_trainable(self.module) if self.sharded else None
        totals = self.state.compute.totals(self.dp)  # a collective: before the process group ends
        self.acc.end_training()
        last_line = lines[-1] if lines else {}
        last_eval = next((r for r in reversed(lines) if m.EVAL_AT in r), {})
        final = {
            "metrics": {k: v for k, v in last_line.items() if not k.startswith(m.EVAL_PREFIX)},
            "eval": {k: v for k, v in last_eval.items() if k.startswith(m.EVAL_PREFIX)},
            "updates": self.state.counters.update, "optimizer_steps": self.state.counters.optimizer_steps,
            "wall_time": self.state.counters.wall_time, "compute": totals,
            "cell_id": cell_id(cfg), "precision": self.precision,
            "threads": torch.get_num_threads(), "eval_videos": rows, "base_eval_videos": self.base_rows(),
            "provenance": export.provenance(),
        }
        if not main:
            return final
        if cfg.save_videos:
            save_eval_videos(videos, out / "samples" / "final_eval.pt")
            export.write_eval_videos(videos, out, gif=self.model.gif_preview)
        export.export_policy(self.model, cfg.to_dict(), out, final, gathered)
        atomic_write_json(out / "final.json", final)
        atomic_write_text(out / "DONE", "done\n")
        return final


def save_eval_videos(videos: torch.Tensor, path: Path) -> None:
    """Eval videos Tensor[N, 3, F, H, W] as float16 in [-1, 1] (a tensor file: loaded with weights_only)."""
    import io

    buf = io.BytesIO()
    torch.save(videos.clamp(-1, 1).half(), buf)
    atomic_write_bytes(path, buf.getvalue())


def train(
    cfg: RunConfig,
    out_dir: Path,
    *,
    resume: bool = True,
    progress: Progress | None = None,
    model: Any = None,
    reward: Any = None,
) -> dict[str, Any]:
    """Run (or resume) one GRPO run into out_dir; returns the final.json dict."""
    import json

    validate(cfg)
    experiment = section(cfg, Compared)
    weights.check_weight_paths(experiment)  # a missing model or reward folder stops here, before any work
    if model is None:
        weights.check_model_present(experiment)  # a named checkpoint not in the local cache: one line, no model built
    cfg = resolve(cfg)
    out = Path(out_dir)
    created = not out.exists()
    cfg_path = out / "config.yaml"
    if resume and cfg_path.is_file():
        old = safe_yaml.load_file(cfg_path, "run config") or {}  # a run folder is untrusted input
        if not isinstance(old, dict):
            raise UserError(f"{cfg_path}: not a run config (a mapping of key: value); use --no-resume or another --out")
        if cell_id(old) != cell_id(cfg):
            diff = sorted(k for k in set(old) | set(cfg.to_dict()) if old.get(k) != cfg.to_dict().get(k))
            raise UserError(f"{out}: holds a run of a different config (keys {diff}); "
                            "use --no-resume to overwrite or choose another --out")
        if (out / "DONE").is_file() and (out / "final.json").is_file():
            return json.loads((out / "final.json").read_text())
    # The model and reward load before anything is written: a run that cannot start leaves no
    # config.yaml behind to refuse the corrected command, and --no-resume deletes nothing.
    try:
        trainer = Trainer(cfg, out, model, reward)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        checkpoint.clear(out)
        for name in ("DONE", "final.json", "metrics.jsonl"):
            (out / name).unlink(missing_ok=True)
    atomic_write_text(cfg_path, yaml.safe_dump(cfg.to_dict(), sort_keys=True))
    return trainer.run(resume, progress)
