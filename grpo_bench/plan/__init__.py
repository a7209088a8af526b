"""The cost planner: before anything loads, what one run needs per process (memory, time), from its resolved
config and its model's architecture alone (``grpo-bench plan``, the train command's memory check).
``inputs.py`` declares what it reads of a run (``PlanInputs``, a section: the planner never holds the run config),
``estimate.py`` sums the terms, ``costs.py`` holds them, ``spec.py`` the architecture they read (``ModelSpec``) and
``model_specs.py`` builds it from a named checkpoint or a tiny preset."""
