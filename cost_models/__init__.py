"""Cost models: specs and presets of models, GPUs and jobs; compute, communication and memory costs;
calibration. Imports nothing else of the project.

The names below are loaded on first use (PEP 562 ``__getattr__``): importing a light module of this package
(``errors``, ``specs``, ``base``) does not load scipy and pandas, which the analytic model and calibration
need, so ``dcpsim --help`` starts fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dcpsim.cost_models.analytic import AnalyticCostModel
    from dcpsim.cost_models.base import CostModel, GroupBatch, GroupCosts
    from dcpsim.cost_models.calibration import Calibration, default_calibration
    from dcpsim.cost_models.constant import ConstantCostModel
    from dcpsim.cost_models.errors import CalibrationError, InfeasibleError, SpecError
    from dcpsim.cost_models.presets import get_gpu, get_model
    from dcpsim.cost_models.specs import GPUSpec, JobSpec, ModelSpec
    from dcpsim.cost_models.terms import CostTerms

_HOME = {
    "AnalyticCostModel": "analytic",
    "CostModel": "base", "GroupBatch": "base", "GroupCosts": "base",
    "Calibration": "calibration", "default_calibration": "calibration",
    "ConstantCostModel": "constant",
    "CalibrationError": "errors", "InfeasibleError": "errors", "SpecError": "errors",
    "get_gpu": "presets", "get_model": "presets",
    "GPUSpec": "specs", "JobSpec": "specs", "ModelSpec": "specs",
    "CostTerms": "terms",
}

__all__ = ["AnalyticCostModel", "Calibration", "CalibrationError", "ConstantCostModel", "CostModel", "CostTerms",
           "GPUSpec", "GroupBatch", "GroupCosts", "InfeasibleError", "JobSpec", "ModelSpec", "SpecError",
           "default_calibration", "get_gpu", "get_model"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
