"""The shipped calibrations as the golden numbers of the refactoring tests were printed with: before the GEMM
peak was fitted end to end to the dgxc-benchmarking rows (cost_models/data/measured/gemm_fit.json). Only the
GEMM curve moved (791.2 TFLOP/s, 0.8 × 989, the published assumption it replaced; half-saturation unchanged),
so these goldens keep pinning what they pinned: the refactors, not the calibration.

A test module uses it with ``pytestmark = pytest.mark.usefixtures("calibration_before_gemm_fit")`` after
importing the fixture."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcpsim.cost_models import analytic
from dcpsim.cost_models.calibration import SaturatingCurve, default_calibration

GEMM_BEFORE_FIT = SaturatingCurve(791.2, 192.0)


def calibration_before(gpu):
    return replace(default_calibration(gpu), gemm=GEMM_BEFORE_FIT)


@pytest.fixture
def calibration_before_gemm_fit(monkeypatch):
    """AnalyticCostModel's default calibration with the GEMM curve of before the fit."""
    monkeypatch.setattr(analytic, "default_calibration", calibration_before)
