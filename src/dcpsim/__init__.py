"""dcpsim: a simulator and research testbed for dynamic context parallelism (DCP) in long-context training.

One import name. The repository keeps its layers as top-level folders; the install maps each under this
package (``pyproject.toml``'s ``package-dir``):

=====================  ==========================================================================
``dcpsim.traces``      the batch type, length traces, generators, presets, global batches
``dcpsim.cost_models`` model/GPU/job specs, compute, communication and memory costs, calibration
``dcpsim.policies``    the Plan types and validator, the policy registry, the policies
``dcpsim.sim``         the discrete-event engine, the Timeline schema and the metrics
``dcpsim.real_runtime`` CP attention in torch, the runner and profilers (needs the ``runtime`` extra)
``dcpsim.experiments`` the ``dcpsim`` command line, scenarios, figures, sweeps
=====================  ==========================================================================

This folder lives under ``src/`` so that a checkout's root on ``sys.path`` never shadows the installed
package: code and tests always import what ``pip install`` put in place.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dcpsim")
except PackageNotFoundError:  # pragma: no cover - only when the files are used without installing
    __version__ = "0+unknown"

__all__ = ["__version__"]
