"""The fixed per-ring-step cost is calibratable from ring_fwd / ring_bwd profile rows (cost_models.fitting)."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dcpsim.cost_models import get_gpu
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fit_overheads import fit_step_overhead, ring_kernel_seconds
from dcpsim.cost_models.fitting import fit_calibration
from dcpsim.cost_models.profile_table import COLUMNS, validate_profile


def rows(seconds_of, ops=("ring_fwd", "ring_bwd"), link="nvlink"):
    recs = []
    for op in ops:
        for n, c in ((4096, 2), (8192, 4), (16384, 8), (32768, 8)):
            recs.append({"op": op, "tokens": n, "heads": 32, "kv_heads": 8, "head_dim": 128, "group_size": c,
                         "link": link, "device": "h100", "seconds": seconds_of(op, n, c), "source": "synthetic"})
    df = pd.DataFrame(recs).reindex(columns=list(COLUMNS))
    return validate_profile(df.astype(object).where(df.notna(), ""))


def test_a_known_per_step_cost_is_recovered():
    """Rows made as the model's own time + 30 µs (fwd) / 45 µs (bwd) per ring step beyond the first."""
    cal = published_calibration(get_gpu("h100"))
    probe = rows(lambda op, n, c: 1.0)
    pf, pb = ring_kernel_seconds(probe, cal)
    extra = {"ring_fwd": 30e-6, "ring_bwd": 45e-6}
    made = probe.copy()
    steps = probe["group_size"].to_numpy(np.float64) - 1
    is_fwd = (probe["op"] == "ring_fwd").to_numpy()
    made["seconds"] = np.where(is_fwd, pf + extra["ring_fwd"] * steps, pb + extra["ring_bwd"] * steps)
    fitted, report = fit_calibration(made, cal, "ring-fit")
    assert fitted.ring_step_overhead_fwd_s == pytest.approx(30e-6, rel=1e-4)
    assert fitted.ring_step_overhead_bwd_s == pytest.approx(45e-6, rel=1e-4)
    assert report.term("ring_step_overhead_fwd_s").how == "fitted"
    assert report.term("ring_step_overhead_fwd_s").mape < 1e-4


def test_closed_form_and_clipping():
    assert fit_step_overhead(np.array([1.0, 2.0]), np.array([1.5, 3.0]), np.array([1, 2])) == pytest.approx(
        (0.5 * 1 / 1.5**2 + 1.0 * 2 / 3.0**2) / (1 / 1.5**2 + 4 / 3.0**2))
    assert fit_step_overhead(np.array([2.0]), np.array([1.0]), np.array([3])) == 0.0


def test_network_rows_are_refused_with_one_clear_error():
    cal = published_calibration(get_gpu("h100"))
    with pytest.raises(CalibrationError, match="ring rows over network links are not fitted yet"):
        fit_calibration(rows(lambda op, n, c: 1e-3, link="network"), replace(cal), "x")
