"""The harness's own 2-step ODE sampler and a diffusers scheduler spaced as the harness spaces its steps: what the
model tests compare each diffusers pipeline's sampler against."""

from __future__ import annotations

import numpy as np
import torch

from grpo_bench.core.sampling import StepTable, transition
from grpo_bench.core.schedule import sigmas as harness_sigmas

__all__ = ["HarnessSpacingScheduler", "harness_ode", "harness_sigmas"]


def harness_ode(model, noise, prompts, steps, shift, guidance):
    """The harness's sampler: shifted schedule, ODE kernel, CFG v_u + g (v_c - v_u)."""
    sig = harness_sigmas(steps, shift)
    table = StepTable.ode(sig)  # the evaluation sampler's table, stepped by the training path's transition
    cond = model.encode_prompts(prompts)
    null = model.null_cond(len(prompts))
    x = noise.clone()
    with torch.no_grad():
        for i in range(steps):
            s = torch.full((x.shape[0],), float(sig[i]))
            v = model.velocity(x, s, cond)
            if guidance > 1:
                v_u = model.velocity(x, s, null)
                v = v_u + guidance * (v - v_u)
            x, _ = transition(table, torch.full((x.shape[0],), i, dtype=torch.long), x, v)
    return x


class HarnessSpacingScheduler:
    """Factory for a FlowMatchEulerDiscreteScheduler whose default spacing is the harness's (and
    HunyuanVideo 1.5's) linspace(1, 0, T+1)[:-1] before the shift. WanPipeline calls
    set_timesteps(T) and the scheduler's own default spacing ends at its shifted sigma_min instead;
    the transformer call, guidance and Euler update under test are unchanged."""

    @staticmethod
    def make(shift):
        from diffusers import FlowMatchEulerDiscreteScheduler

        class Sched(FlowMatchEulerDiscreteScheduler):
            def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None, timesteps=None):
                if sigmas is None and timesteps is None:
                    sigmas = np.linspace(1.0, 0.0, num_inference_steps + 1)[:-1]
                super().set_timesteps(None, device, sigmas, mu, timesteps)

        return Sched(shift=shift)
