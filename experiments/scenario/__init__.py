"""Scenarios: the :class:`~experiments.scenario.definition.Scenario` dataclass and the built-in default
(``definition``), and scenario TOML files, the named ones shipped in ``experiments/scenarios/`` (``files``).
Nothing is re-exported here: import from the module."""
