"""Cost models: specs and presets of models, GPUs and jobs; compute, communication and memory costs;
calibration. Imports nothing else of the project."""

from dcpsim.cost_models.analytic import AnalyticCostModel
from dcpsim.cost_models.base import CostModel, GroupBatch, GroupCosts
from dcpsim.cost_models.calibration import Calibration, default_calibration
from dcpsim.cost_models.constant import ConstantCostModel
from dcpsim.cost_models.errors import CalibrationError, InfeasibleError, SpecError
from dcpsim.cost_models.presets import get_gpu, get_model
from dcpsim.cost_models.specs import GPUSpec, JobSpec, ModelSpec
from dcpsim.cost_models.terms import CostTerms

__all__ = ["AnalyticCostModel", "Calibration", "CalibrationError", "ConstantCostModel", "CostModel", "CostTerms", "GPUSpec",
           "GroupBatch", "GroupCosts", "InfeasibleError", "JobSpec", "ModelSpec", "SpecError",
           "default_calibration", "get_gpu", "get_model"]
