"""Checking the simulator against real execution (``dcpsim validate``): profile → calibrate → plan →
simulate → run → compare.

``settings`` (what a validation run is asked to do, the command's defaults), ``pipeline``
(:func:`~experiments.validation.pipeline.run_validation`, the whole run, returning its document), ``report``
(the document as terminal text) and ``plot`` (predicted against measured). The pipeline lives in experiments/,
not real_runtime/, because it simulates (sim.simulate), which real_runtime may not import (the import table of
docs/architecture.md); everything it runs for real is real_runtime's. Nothing is re-exported here.
"""
