"""Flow-GRPO-Fast (Liu et al., 2025): ODE sampling but for a short random window of CPS steps, only those trained."""

from grpo_bench.api import Field, Method, MethodConfig, PluginParams, RuleSpec, register_method


@register_method("flow_grpo_fast")
class FlowGRPOFast(Method):
    """Flow-GRPO-Fast.

    Kernel ``cps`` at a = 0.8 with CPS's unscaled log-prob inside a window of ``method.window_size`` (3)
    consecutive steps, the ODE elsewhere: flow_grpo's CFG-free SD3.5 fast config (the world samples without CFG),
    ``pickscore_sd3_fast_nocfg``, the one its multi-node launch script runs. The
    window's start is drawn uniformly, once per update and for the whole batch, from
    [window_range_start, window_range_end - window_size] (default end T//2, the official configs'
    ``(0, num_steps // 2)``); every step of the window is stored and trained, no other. With shared group
    noise the group's ODE prefix before the window is computed once per group.
    """

    paper = "Flow-GRPO: Training Flow Matching Models via Online RL (Liu et al., 2025), Flow-GRPO-Fast"
    source = ("yifan123/flow_grpo@9745241: config/grpo.py pickscore_sd3_fast_nocfg (l.323; clip 1e-5 l.345, beta 0 "
              "l.346, global_std l.347, noise_level 0.8 l.348, window 3 l.349, range (0, T//2) l.350, sde_type cps "
              "l.351), launched by scripts/multi_node/sd3_fast.sh:17; same_latent False config/base.py:63; the cps "
              "step's unscaled log-prob flow_grpo/diffusers_patch/sd3_sde_with_logprob.py:86; the window "
              "sd3_pipeline_with_logprob_fast.py:137")
    step_rule = "CPS SDE window of method.window_size (3) steps, start random per update in [0, T//2 - size]; trained"
    share_prefix = True
    revision = 1  # 1: the CFG-free SD3.5 config (cps kernel at 0.8, window 3, global std); was flow 0.7, window 2

    class Params(PluginParams):
        window_size: int = Field(3, ge=1)
        """Steps in the SDE window (pickscore_sd3_fast_nocfg: 3, config/grpo.py:349)."""
        window_range_start: int = Field(0, ge=0)
        """Lowest window start."""
        window_range_end: int | None = Field(None, ge=1)
        """The window ends at or before this step; None: T // 2 (the official configs), at least window_size (the
        default end grows to the window on schedules too short for it)."""

    defaults = MethodConfig(
        kernel="cps",  # sde_type = "cps" (config/grpo.py:351)
        noise_level=0.8,  # config/grpo.py:348
        logprob="unscaled",  # the cps step's -(x' - mu)^2 (sd3_sde_with_logprob.py:86)
        shared_noise=False,  # same_latent = False (config/base.py:63; the fast config keeps it)
        adv_norm="global",  # global_std = True (config/grpo.py:347)
        clip_range=1e-5,  # config/grpo.py:345
        kl="none",  # beta = 0 (config/grpo.py:346)
        equalizer=False,
    )

    def own_step_rule(self) -> RuleSpec:
        """A random window (core/step_rules.py ``window``): the start drawn once per update."""
        p = self.params
        return RuleSpec("window", {"size": p.window_size, "range_start": p.window_range_start,
                                   "range_end": p.window_range_end, "placement": "random"},
                        {"size": "method.window_size", "range_start": "method.window_range_start",
                         "range_end": "method.window_range_end"})
