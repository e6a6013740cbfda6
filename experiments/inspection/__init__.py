"""Looks at one thing at a time, behind the commands of the same names: one layer's cost
(``layer_cost``, ``dcpsim cost``), a model's spec and counts (``model_summary``, ``dcpsim model``), a length
trace's statistics (``trace_stats``, ``dcpsim trace``), per-rank skew of a scenario's policies (``skew``,
``dcpsim skew``). Nothing is re-exported here."""
