"""MixGRPO (Li et al., 2025): FlowGRPO's SDE and training only inside a window sliding over the schedule."""

from grpo_bench.api import Field, Method, MethodConfig, PluginParams, RuleSpec, register_method


@register_method("mix_grpo")
class MixGRPO(Method):
    """MixGRPO.

    Kernel ``flow`` (FlowGRPO's SDE: the shipped script passes ``--flow_grpo_sampling``, "True for MixGRPO, False
    for DanceGRPO") inside a window of ``method.window_size`` consecutive steps, the ODE outside. The window
    starts at step 0 and moves ``method.window_stride`` steps later every ``method.iters_per_window`` updates;
    steps run up to T - 3 (the official ``max_timesteps = sampling_steps - 2`` with ``range(cur, min(cur + size,
    max_timesteps))``), and the start rolls back to 0 when the window would be empty. Every window step is
    trained. With shared group noise the ODE prefix before the window is computed once per group.
    """

    paper = "MixGRPO: Unlocking Flow-based GRPO Efficiency with Mixed ODE-SDE (Li et al., 2025)"
    source = ("Tencent-Hunyuan/MixGRPO@e5cdd6a: scripts/finetune/finetune_flux_grpo_MixGRPO.sh (eta 0.7 l.55, "
              "--init_same_noise l.155, --flow_grpo_sampling l.196), fastvideo/train_grpo_flux.py (flow_grpo_step "
              "l.145-153, group std torch.std + 1e-8 l.448), fastvideo/utils/sampling_utils.py (flow_grpo_step: "
              "std_dev_t = eta sqrt(sigma/(1-sigma)) l.177), fastvideo/utils/grpo_states.py (the window)")
    step_rule = "SDE window of method.window_size (4) steps sliding 1 step every 25 updates over 0..T-3; all trained"
    share_prefix = True
    revision = 1  # 1: FlowGRPO's SDE (was DanceGRPO's), unbiased group std

    class Params(PluginParams):
        window_size: int = Field(4, ge=1)
        """Steps in the window (the official script's group_size = 4)."""
        iters_per_window: int = Field(25, ge=1)
        """Updates before the window moves (iters_per_group = 25)."""
        window_stride: int = Field(1, ge=1)
        """Steps the window moves (prog_overlap_step = 1)."""

    defaults = MethodConfig(
        kernel="flow",  # --flow_grpo_sampling (finetune_flux_grpo_MixGRPO.sh:196)
        noise_level=0.7,  # eta = 0.7 (finetune_flux_grpo_MixGRPO.sh:55), FlowGRPO's a
        logprob="gaussian",  # flow_grpo_step's Gaussian density (sampling_utils.py)
        shared_noise=True,  # --init_same_noise (finetune_flux_grpo_MixGRPO.sh:155)
        adv_norm="group_unbiased",  # group_rewards.std() + 1e-8 (train_grpo_flux.py:448; eps 1e-8 vs our 1e-6)
        clip_range=1e-4,  # --clip_range 1e-4 (finetune_flux_grpo_MixGRPO.sh:156)
        kl="none",
        equalizer=False,
    )

    def own_step_rule(self) -> RuleSpec:
        """A sliding window (core/step_rules.py ``window``) over steps 0..T-3: the official ``max_timesteps =
        sampling_steps - 2`` is the range's exclusive end."""
        p = self.params
        return RuleSpec("window", {"size": p.window_size, "range_start": 0, "range_end": -2, "placement": "sliding",
                                   "iters_per_window": p.iters_per_window, "stride": p.window_stride},
                        {"size": "method.window_size", "iters_per_window": "method.iters_per_window",
                         "stride": "method.window_stride"})
