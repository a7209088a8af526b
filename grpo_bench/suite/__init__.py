"""Suites: specs expanded into cells, the runner, stored results."""
