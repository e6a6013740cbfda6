"""Fitting calibrations: exact recovery on synthetic data, leave-one-out accuracy on the published attention
figures, the shipped calibrations (reproducible, monotone, picked up by default), the CP-scaling check, and
that a calibration changes a simulation only through the terms it calibrates."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dcpsim.cost_models import AnalyticCostModel, Calibration, CostTerms, GroupBatch, default_calibration, get_gpu
from dcpsim.cost_models.calibration import COLLECTIVES, LINKS, LinkModel, SaturatingCurve, published_calibration
from dcpsim.cost_models.data import build_defaults
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.fitting import (
    cp_scaling_check,
    fit_calibration,
    fit_link,
    fit_saturating,
    loo_errors,
    loo_summary,
)
from dcpsim.cost_models.profile_table import COLUMNS, read_profile, validate_profile
from tests.conftest import small_job

DATA = Path(build_defaults.__file__).parent
SHIPPED_KERNELS = ("fa3", "fa2", "cudnn9.1", "cudnn-1.19.0")


@pytest.fixture(scope="module")
def profile():
    return read_profile(DATA / "profile_h100.csv")


@pytest.fixture(scope="module")
def fitted(profile):
    return fit_calibration(profile, published_calibration(get_gpu("h100")), build_defaults.NAMES["h100"])


def table(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    return validate_profile(df.astype(object).where(df.notna(), ""), "synthetic")


def test_saturating_fit_recovers_exact_parameters():
    x = np.array([256, 512, 1024, 4096, 16384], dtype=float)
    true = SaturatingCurve(640.0, 550.0)
    flops = 1e12 * x
    c = fit_saturating(x, flops, true.seconds(flops, x))
    assert c.peak_tflops == pytest.approx(640.0, rel=1e-5) and c.half == pytest.approx(550.0, rel=1e-4)


def test_link_fit_recovers_exact_parameters():
    true = LinkModel(base_s=9e-6, hop_s=3e-6, busbw_gbs=350.0)
    n = np.repeat([2, 4, 8], 6).astype(float)
    nbytes = np.tile(np.geomspace(1e5, 1e9, 6), 3)
    for op in ("all_gather", "all_reduce", "reduce_scatter", "all_to_all"):
        base = published_calibration(get_gpu("h100")).link(op, "nvlink")
        lm = fit_link(op, nbytes, n, true.seconds(op, nbytes, n), base)
        assert (lm.base_s, lm.hop_s, lm.busbw_gbs) == pytest.approx((9e-6, 3e-6, 350.0), rel=1e-4)


def test_link_fit_with_one_group_size_keeps_the_base_hop():
    base = LinkModel(8.4e-6, 3.4e-6, 370.0)
    nbytes = np.geomspace(1e4, 1e9, 8)
    true = LinkModel(20e-6, 3.4e-6, 300.0)
    lm = fit_link("send_recv", nbytes, np.full(8, 2.0), true.seconds("send_recv", nbytes, 2), base)
    assert lm.hop_s == 3.4e-6 and lm.busbw_gbs == pytest.approx(300.0, rel=1e-4)
    assert lm.base_s == pytest.approx(20e-6, rel=1e-4)


def test_times_that_do_not_grow_with_bytes_are_an_error():
    with pytest.raises(CalibrationError, match="do not grow with bytes"):
        fit_link("all_gather", np.array([1e6, 1e7, 1e8]), np.array([2.0, 2.0, 2.0]),
                 np.array([3e-3, 2e-3, 1e-3]), LinkModel(8.4e-6, 3.4e-6, 370.0))


def test_leave_one_out_median_error_per_kernel_is_within_10_percent(profile):
    """Each published attention row predicted by its group's curve fitted without it."""
    med = loo_summary(profile)
    assert set(med) == set(SHIPPED_KERNELS)
    for k in SHIPPED_KERNELS:
        assert med[k] <= 0.10, f"{k}: leave-one-out median |error| {med[k]:.1%}"
    e = loo_errors(profile)
    assert len(e) == (profile["op"].isin(["attn_fwd", "attn_bwd"])).sum()
    assert e["rel_error"].abs().max() < 0.15


def test_shipped_calibrations_are_reproducible_from_the_shipped_profile(profile, fitted):
    cal, _ = fitted
    assert build_defaults.shipped_h100(cal).to_json() + "\n" == (DATA / "calibration_h100.json").read_text()
    h200, _ = fit_calibration(profile, published_calibration(get_gpu("h200")), build_defaults.NAMES["h200"])
    assert h200.to_json() + "\n" == (DATA / build_defaults.FILES["h200"]).read_text()


def test_default_calibration_picks_up_the_shipped_files():
    for gpu in ("h100", "h200"):
        cal = default_calibration(get_gpu(gpu))
        assert cal == Calibration.load(DATA / f"calibration_{gpu}.json")
        assert {f"{op}:{link}" for op in COLLECTIVES for link in LINKS} <= set(cal.comm)
    h100, h200 = (default_calibration(get_gpu(g)) for g in ("h100", "h200"))
    kernels = Calibration.load(DATA / build_defaults.FILES["h200"])
    assert h100.name == build_defaults.NAMES["h100"] and kernels.name == build_defaults.NAMES["h200"]
    assert h200.name == "h200-distca-steps"  # build_defaults step 6: the end-to-end fit of the kernel fit
    for term in ("attn_fwd", "attn_bwd", "comm"):
        assert getattr(h100, term) == getattr(kernels, term)
    assert h100.gemm.peak_tflops == build_defaults.H100_GEMM_PEAK_TFLOPS  # step 7: fitted to the dgxc rows
    # the end-to-end fit moves the GEMM rate and the link bandwidths only
    assert (h200.attn_fwd, h200.attn_bwd, h200.attention) == (kernels.attn_fwd, kernels.attn_bwd, kernels.attention)
    assert h200.gemm.half == kernels.gemm.half and h200.gemm.peak_tflops < kernels.gemm.peak_tflops
    assert set(h200.comm) == set(kernels.comm)


def test_terms_absent_from_the_profile_keep_the_base(fitted):
    cal, report = fitted
    base = published_calibration(get_gpu("h100"))
    assert cal.gemm == base.gemm
    for op in COLLECTIVES:
        assert cal.comm[f"{op}:network"] == base.comm[f"{op}:network"]  # NCCL data is intra-node only
    for key in ("send_recv:nvlink", "all_to_all:nvlink"):
        assert cal.comm[key] == base.comm[key]
    hows = {t.key: t.how for t in report.terms}
    assert hows["attn_fwd"] == "fitted" and hows["attn_bwd"] == "derived" and hows["gemm"] == "base"
    assert all(hows[f"{op}:nvlink"] == "fitted" for op in ("all_gather", "reduce_scatter", "all_reduce"))


def test_per_term_errors_are_reported(fitted):
    _, report = fitted
    assert report.term("attn_fwd").mape < 0.05
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        t = report.term(f"{op}:nvlink")
        assert t.rows == 33 and t.mape < 0.15


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_shipped_curves_are_monotone(gpu):
    """Attention time grows with length, GEMM time with tokens, collective time with bytes and ranks."""
    cal = default_calibration(get_gpu(gpu))
    L = np.geomspace(16, 1 << 20, 400)
    for curve in (cal.attn_fwd, cal.attn_bwd):
        assert curve.peak_tflops > 0 and curve.half >= 0
        assert np.all(np.diff(curve.seconds(L * L, L)) > 0)
        assert np.all(np.diff(curve.tflops(L)) >= 0)
    assert np.all(np.diff(cal.gemm.seconds(L * 1e8, L)) > 0)
    nbytes = np.geomspace(1, 1e11, 300)
    for key, lm in cal.comm.items():
        op = key.split(":")[0]
        assert np.all(np.diff(lm.seconds(op, nbytes, 8)) > 0), key
        assert np.all(np.diff([float(lm.seconds(op, 1e8, n)) for n in range(2, 65)]) >= 0), key


def test_causal_backward_is_derived_from_the_forward_penalty(fitted):
    cal, report = fitted
    full_bwd = report.groups[("fa3", "attn_bwd", 0, 128)]
    L = np.array([512.0, 2048.0, 16384.0])
    ratio = cal.attn_bwd.tflops(L) / full_bwd.tflops(L)
    g = report.groups
    expected = g[("fa3", "attn_fwd", 1, 128)].tflops(L) / g[("fa3", "attn_fwd", 0, 128)].tflops(L)
    np.testing.assert_allclose(ratio, expected, rtol=0.03)
    assert ratio[0] < 0.75 and ratio[-1] > 0.9  # causal penalty large on short blocks, small on long ones


def test_measured_causal_backward_is_fitted_directly(profile):
    L = np.array([512, 1024, 2048, 4096, 8192, 16384])
    true = SaturatingCurve(500.0, 900.0)
    rows = [{"op": "attn_bwd", "kernel": "k", "q_len": x, "kv_len": x, "heads": 8, "head_dim": 128,
             "causal": 1, "seconds": float(true.seconds(2.5 * 4 * 128 * 8 * x * x / 2, x)),
             "source": "synthetic"} for x in L]
    rows += [{**r, "op": "attn_fwd", "seconds": r["seconds"] / 2.5} for r in rows]
    cal, report = fit_calibration(table(rows), published_calibration(get_gpu("h100")), "t")
    assert report.term("attn_bwd").how == "fitted"
    assert (cal.attn_bwd.peak_tflops, cal.attn_bwd.half) == pytest.approx((500.0, 900.0), rel=1e-4)
    assert cal.comm == published_calibration(get_gpu("h100")).comm


def test_gemm_rows_are_fitted_when_given():
    true = SaturatingCurve(700.0, 300.0)
    rows = [{"op": "gemm", "tokens": t, "in_features": 4096, "out_features": 4096, "device": "x",
             "seconds": float(true.seconds(2.0 * t * 4096 * 4096, t)), "source": "synthetic"}
            for t in (128, 512, 2048, 8192, 32768)]
    cal, report = fit_calibration(table(rows), published_calibration(get_gpu("h100")), "g")
    assert (cal.gemm.peak_tflops, cal.gemm.half) == pytest.approx((700.0, 300.0), rel=1e-4)
    assert report.term("attn_fwd").how == "base" and report.kernel is None


def test_unknown_kernel_or_head_dim_is_an_error(profile):
    base = published_calibration(get_gpu("h100"))
    with pytest.raises(CalibrationError, match="no attention rows of kernel 'fa9'"):
        fit_calibration(profile, base, "x", kernel="fa9")
    with pytest.raises(CalibrationError, match="head_dim 96"):
        fit_calibration(profile, base, "x", kernel="fa3", head_dim=96)
    cal, report = fit_calibration(profile, base, "x", kernel="fa3", head_dim=256)
    assert report.term("attn_bwd").how == "base"  # no d256 backward published
    assert cal.attn_fwd == report.groups[("fa3", "attn_fwd", 1, 256)]


def test_cp_scaling_trend_matches_the_distca_measurements():
    """Relative CP speed-ups (tp = 1) of the DistCA per-document attention times against the model's
    c · eff(L/c) / eff(L) with the shipped forward curve: within 10% from 2K tokens up."""
    per_doc = pd.read_csv(build_defaults.REFERENCE / "attn_h100_per_doc_by_cp_tp.csv")
    chk = cp_scaling_check(per_doc, default_calibration(get_gpu("h100")).attn_fwd)
    cp = chk[(chk["tp"] == 1) & (chk["cp"] > 1) & (chk["L"] >= 2048)]
    assert len(cp) == 18
    assert (cp["ratio"] - 1).abs().max() < 0.10
    shipped = pd.read_csv(DATA / "cp_scaling_check.csv")
    np.testing.assert_allclose(shipped["model_speedup"], chk["model_speedup"].round(4), atol=1e-4)


# ---- a calibration changes a simulation only through its own terms ----------------------------------------
def _groups(u: int) -> GroupBatch:
    return GroupBatch(np.array([32768, 8192, 4096, 4096]), np.array([0, 0, 1, 1]), np.array([8, 2]),
                      np.array([u, 1]), np.array([0, 8]))


def test_changing_attn_fwd_changes_forward_compute_only():
    job = small_job(pool=16)
    cal = default_calibration(job.gpu)
    slow = replace(cal, attn_fwd=replace(cal.attn_fwd, peak_tflops=cal.attn_fwd.peak_tflops / 2))
    single_curve = CostTerms.parse("all,-attention_backend")  # the calibration's own curve prices attention
    a, b = (AnalyticCostModel(job, c, single_curve).group_costs(_groups(8)) for c in (cal, slow))
    assert np.all(b.fwd_compute_s > a.fwd_compute_s)
    np.testing.assert_array_equal(a.bwd_compute_s, b.bwd_compute_s)
    # Ulysses communication does not overlap compute; the ring group here hides its transfers either way
    np.testing.assert_array_equal(a.fwd_comm_s, b.fwd_comm_s)
    np.testing.assert_array_equal(a.bwd_comm_s, b.bwd_comm_s)
    assert AnalyticCostModel(job, slow).grad_sync_s(0) == AnalyticCostModel(job, cal).grad_sync_s(0)


def test_changing_a_link_changes_communication_only():
    job = small_job(pool=16)
    cal = default_calibration(job.gpu)
    comm = dict(cal.comm)
    comm["all_to_all:nvlink"] = replace(comm["all_to_all:nvlink"], busbw_gbs=10.0)
    slow = replace(cal, comm=comm)
    a, b = (AnalyticCostModel(job, c).group_costs(_groups(8)) for c in (cal, slow))
    np.testing.assert_array_equal(a.fwd_compute_s, b.fwd_compute_s)
    np.testing.assert_array_equal(a.bwd_compute_s, b.bwd_compute_s)
    assert b.fwd_comm_s[0] > a.fwd_comm_s[0] and b.fwd_comm_s[1] == a.fwd_comm_s[1]


def test_a_calibration_equal_to_the_default_gives_the_same_simulation(tmp_path):
    from dcpsim.policies import create_policy
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces.batching import GlobalBatch

    job = small_job(pool=8, max_tokens_per_rank=16384)
    p = tmp_path / "same.json"
    p.write_text(default_calibration(job.gpu).to_json())
    batch = GlobalBatch.of([30000, 12000, 8000, 4000, 3000, 2000, 1000, 500, 20000, 6000])
    results = []
    for cm in (AnalyticCostModel(job), AnalyticCostModel(job, Calibration.load(p))):
        plan = create_policy("static-cp").plan(batch, job, cm)
        r = simulate_plan(plan, batch, cm)
        results.append((plan.to_json(), r.timeline.to_frame().to_json(), repr(r.metrics)))
    assert results[0] == results[1]
    assert max(len(g.ranks) for mb in plan.microbatches for g in mb.groups) > 1  # CP communication is priced


def _profile(rows):
    import pandas as pd

    from dcpsim.cost_models.profile_table import COLUMNS, validate_profile

    rows = [dict(r, device="cpu", source="") for r in rows]
    return validate_profile(pd.DataFrame(rows).reindex(columns=COLUMNS).astype(object).fillna("").astype(str))


def test_a_collective_whose_times_do_not_grow_borrows_the_profiles_bandwidth_with_a_warning():
    """Timing noise on a loaded machine (the times of an all-to-all fall with bytes) must not end the fit: the
    collective takes the bandwidth the same profile fitted on its link (all_gather's 100 GB/s here), its latency
    is fitted with it (the mean time less the bytes' share, ~2 ms), and the report says so in one line."""
    from dcpsim.cost_models.calibration import default_calibration
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.presets import get_gpu

    base = default_calibration(get_gpu("h100"))
    rows = [dict(op="all_to_all", link="nvlink", bytes=b, group_size=4, seconds=s)
            for b, s in ((1 << 20, 3e-3), (1 << 22, 2e-3), (1 << 24, 1e-3))]
    rows += [dict(op="all_gather", link="nvlink", bytes=b, group_size=4,
                  seconds=float(LinkModel(1e-5, 3.4e-6, 100.0).seconds("all_gather", b, 4)))
             for b in (1 << 20, 1 << 22, 1 << 24)]
    cal, report = fit_calibration(_profile(rows), base, "noisy")
    assert len(report.warnings) == 1 and report.warnings[0].startswith("all_to_all:nvlink: ")
    assert "do not grow with bytes" in report.warnings[0]
    assert "bandwidth 100 GB/s from the median of this profile's 1 fitted nvlink" in report.warnings[0]
    a2a, ag = cal.link("all_to_all", "nvlink"), cal.link("all_gather", "nvlink")
    assert report.term("all_to_all:nvlink").how == "derived"
    assert ag.busbw_gbs == pytest.approx(100.0, rel=1e-3) and a2a.busbw_gbs == ag.busbw_gbs
    assert 1e-3 < a2a.base_s < 3e-3  # the loaded machine's per-call wait, not the H100's microseconds
    assert report.term("all_gather:nvlink").how == "fitted"


def test_with_no_other_collective_on_the_link_the_base_bandwidth_is_kept_with_a_warning():
    from dcpsim.cost_models.calibration import default_calibration
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.presets import get_gpu

    base = default_calibration(get_gpu("h100"))
    rows = [dict(op="send_recv", link="nvlink", bytes=b, group_size=2, seconds=s)
            for b, s in ((1 << 12, 5e-3), (1 << 18, 4e-3), (1 << 24, 3e-3))]
    cal, report = fit_calibration(_profile(rows), base, "noisy")
    assert len(report.warnings) == 1 and "h100" in report.warnings[0] and "send_recv:nvlink" in report.warnings[0]
    sr = cal.link("send_recv", "nvlink")
    assert sr.busbw_gbs == base.link("send_recv", "nvlink").busbw_gbs and 3e-3 < sr.base_s < 5e-3


def test_noisy_probe_times_on_a_loaded_machine_never_fail_the_fit():
    """Synthetic probes as a loaded 2-core host gives them: a 0.4 GB/s link under a 3-7 ms per-call wait (the
    group's slowest member finishing its burst), 6 sizes from 4 KiB to 16 MiB, 40 seeds. Every fit succeeds;
    a fit that warns borrowed a bandwidth, one that does not recovers the link within a factor 2."""
    from dcpsim.cost_models.calibration import default_calibration
    from dcpsim.cost_models.fitting import fit_calibration
    from dcpsim.cost_models.presets import get_gpu

    base = default_calibration(get_gpu("h200"))
    sizes = np.geomspace(1 << 12, 1 << 24, 6).round()
    warned = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        rows = []
        for op, g in (("send_recv", 2), ("all_to_all", 2), ("all_to_all", 4), ("all_gather", 4)):
            wait = 0.0 if op == "all_gather" else 1.0
            for b in sizes:
                t = LinkModel(1e-4, 5e-5, 0.4).seconds(op, b, g) + wait * rng.uniform(3e-3, 7e-3)
                rows.append(dict(op=op, link="nvlink", bytes=int(b), group_size=g, seconds=float(t)))
        cal, report = fit_calibration(_profile(rows), base, "noisy")
        warned += bool(report.warnings)
        for w in report.warnings:
            assert "do not grow with bytes" in w and "GB/s from" in w
        for op in ("send_recv", "all_to_all"):
            if report.term(f"{op}:nvlink").how == "fitted":
                assert 0.2 < cal.link(op, "nvlink").busbw_gbs < 0.8, (seed, op)
        assert cal.link("all_gather", "nvlink").busbw_gbs == pytest.approx(0.4, rel=0.05)
