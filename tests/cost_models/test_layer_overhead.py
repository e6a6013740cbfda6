"""The fixed per-layer overhead: old calibration files load with 0, the fit recovers a known overhead from
synthetic layer rows (round trip through the analytic model), clips at 0, and is reported."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dcpsim.cost_models import Calibration, get_gpu, get_model
from dcpsim.cost_models.calibration import published_calibration
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fit_overheads import fit_overhead, layer_kernel_seconds
from dcpsim.cost_models.fitting import fit_calibration
from dcpsim.cost_models.fixed_costs import FIELDS as FIXED_FIELDS
from dcpsim.cost_models.profile_table import COLUMNS, validate_profile

TOKENS = (32, 100, 256, 1000, 4096)


def table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    return validate_profile(df.astype(object).where(df.notna(), ""), "synthetic")


def layer_rows(cal: Calibration, model_name: str = "tiny") -> pd.DataFrame:
    """Layer rows whose times are the analytic model's kernel time plus ``cal``'s overheads."""
    m = get_model(model_name)
    shape = {"heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim, "in_features": m.hidden,
             "out_features": m.ffn}
    probe = table([{"op": op, "tokens": n, **shape, "seconds": 1.0} for op in ("layer_fwd", "layer_bwd")
                   for n in TOKENS])
    fwd, bwd = layer_kernel_seconds(probe, cal)
    is_fwd = (probe["op"] == "layer_fwd").to_numpy()
    secs = np.where(is_fwd, fwd + cal.layer_overhead_fwd_s, bwd + cal.layer_overhead_bwd_s)
    return probe.assign(seconds=secs)


def test_an_old_calibration_json_without_the_fields_loads_with_the_published_defaults(tmp_path):
    """Missing fixed-cost fields take cost_models.fixed_costs' published kernel counts x 3.8 µs."""
    d = published_calibration(get_gpu("h100")).to_dict()
    for k in FIXED_FIELDS:
        del d[k]
    p = tmp_path / "old.json"
    p.write_text(json.dumps(d))
    cal = Calibration.load(p)
    assert cal.layer_overhead_fwd_s == pytest.approx(13 * 3.8e-6)
    assert cal.layer_overhead_bwd_s == pytest.approx(21 * 3.8e-6)
    assert cal.ring_step_overhead_fwd_s == pytest.approx(5 * 3.8e-6)
    assert cal.ring_step_overhead_bwd_s == pytest.approx(7 * 3.8e-6)
    assert cal.microbatch_overhead_fwd_s == cal.microbatch_overhead_bwd_s == pytest.approx(2 * 3.8e-6)


def test_overheads_round_trip_through_json(tmp_path):
    cal = replace(published_calibration(get_gpu("h100")), layer_overhead_fwd_s=1.5e-4,
                  layer_overhead_bwd_s=3e-4)
    p = tmp_path / "cal.json"
    p.write_text(cal.to_json())
    assert Calibration.load(p) == cal


@pytest.mark.parametrize("value", [-1e-3, float("nan"), "fast"])
def test_a_bad_overhead_is_named(value):
    d = published_calibration(get_gpu("h100")).to_dict() | {"layer_overhead_bwd_s": value}
    with pytest.raises(CalibrationError, match="layer_overhead_bwd_s"):
        Calibration.from_dict(d)


@pytest.mark.parametrize("model_name", ["tiny", "llama3-8b"])
def test_fit_recovers_a_known_overhead(model_name):
    base = published_calibration(get_gpu("h100"))
    truth = replace(base, layer_overhead_fwd_s=4.2e-4, layer_overhead_bwd_s=9.1e-4)
    cal, report = fit_calibration(layer_rows(truth, model_name), base, "synthetic")
    assert cal.layer_overhead_fwd_s == pytest.approx(4.2e-4, rel=1e-5)
    assert cal.layer_overhead_bwd_s == pytest.approx(9.1e-4, rel=1e-5)
    for key in ("layer_overhead_fwd_s", "layer_overhead_bwd_s"):
        t = report.term(key)
        assert t.how == "fitted" and t.rows == len(TOKENS) and t.mape < 1e-5
    assert cal.attn_fwd == base.attn_fwd and cal.gemm == base.gemm  # no attention or GEMM rows: base kept


def test_fit_uses_the_curves_fitted_from_the_same_profile():
    """Kernel rows and layer rows together: the overhead is what the *fitted* curves leave unexplained."""
    base = published_calibration(get_gpu("h100"))
    truth = replace(base, gemm=replace(base.gemm, peak_tflops=300.0), layer_overhead_fwd_s=2e-4,
                    layer_overhead_bwd_s=5e-4)
    gemm = [{"op": "gemm", "tokens": n, "in_features": 4096, "out_features": 4096,
             "seconds": float(truth.gemm.seconds(2.0 * n * 4096 * 4096, n))} for n in (64, 512, 4096, 16384)]
    prof = pd.concat([table(gemm), layer_rows(truth)], ignore_index=True)
    cal, _ = fit_calibration(prof, base, "synthetic")
    assert cal.gemm.peak_tflops == pytest.approx(300.0, rel=1e-4)
    assert cal.layer_overhead_fwd_s == pytest.approx(2e-4, rel=1e-3)
    assert cal.layer_overhead_bwd_s == pytest.approx(5e-4, rel=1e-3)


def test_overhead_is_clipped_at_zero_and_absent_rows_keep_the_base():
    assert fit_overhead(np.array([2.0, 3.0]), np.array([1.0, 1.5])) == 0.0
    assert fit_overhead(np.array([1.0, 10.0]), np.array([2.0, 11.0])) == pytest.approx(1.0)
    base = replace(published_calibration(get_gpu("h100")), layer_overhead_fwd_s=1e-5,
                   layer_overhead_bwd_s=2e-5)
    att = table([{"op": "attn_fwd", "q_len": n, "kv_len": n, "heads": 16, "head_dim": 128, "causal": 1,
                  "seconds": 1e-3 * n / 1024} for n in (512, 1024, 2048)])
    cal, report = fit_calibration(att, base, "synthetic")
    assert (cal.layer_overhead_fwd_s, cal.layer_overhead_bwd_s) == (1e-5, 2e-5)
    assert report.term("layer_overhead_fwd_s").how == "base"
