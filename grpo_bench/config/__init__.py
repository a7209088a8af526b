"""What a run is: its config (the component sections, flat keys, presets, validation and key hints), its
identity (the cell id), the named real checkpoints' recipe defaults, its prompt set, its optimizer-step
schedule and the checks of its weights and trackers, all before anything loads (docs/design.md §1).

Below ``train/`` (how one run's loop runs), so that ``suite/`` and ``report/`` read configs and cell ids
without importing the trainer (pyproject [tool.importlinter])."""
