"""dcpsim figures: every figure's PNG, PDF and CSV on a tiny scenario in quick mode; option errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.figures import FIGURES, make_figures, select
from dcpsim.experiments.figures.common import FigureContext
from dcpsim.experiments.scenario.files import load_scenario

TINY = """
description = "tiny test scenario"
model = "llama3-8b"
gpu = "h200"
tp = 1
pp = 2
pool = 8
context_len = 32768
global_batch_tokens = 262144
trace = "32k"
policies = ["static-cp", "mcore-dcp"]
"""


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    d = tmp_path_factory.mktemp("figs")
    path = d / "tiny.toml"
    path.write_text(TINY)
    sc = load_scenario(str(path))
    ctx = FigureContext(d / "out", quick=True)
    return make_figures(d / "out", [sc], quick=True, ctx=ctx), d / "out"


def test_every_figure_writes_png_pdf_csv(figures):
    files, out = figures
    assert set(files) == set(FIGURES) == set("abcdefgh")
    for key, paths in files.items():
        stem = FIGURES[key].STEM
        for ext in ("png", "pdf", "csv"):
            p = out / f"{stem}.{ext}"
            assert p in paths and p.stat().st_size > 0
        assert (out / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / f"{stem}.pdf").read_bytes()[:4] == b"%PDF"


def test_csvs_hold_the_data(figures):
    _, out = figures
    a = pd.read_csv(out / "a_throughput_vs_context.csv")
    assert set(a.policy) == {"static-cp", "mcore-dcp"} and set(a.context_len) == {32768, 262144}
    mc = a[a.policy == "mcore-dcp"]
    assert mc.ok.all() and (mc.speedup_vs_mcore_dcp == 1.0).all()
    # static CP cannot fit a 256K window on 8 ranks: the point is a gap (NaN), not a failed command
    assert not a[(a.policy == "static-cp") & (a.context_len == 262144)].ok.any()
    b = pd.read_csv(out / "b_bubbles.csv")
    assert ((b.pipeline_bubble >= 0) & (b.pipeline_bubble <= 1)).all()
    c = pd.read_csv(out / "c_tokens_vs_time.csv")
    assert (c.compute_s > 0).all() and (c.stage == 0).all()
    d = pd.read_csv(out / "d_scheduling_time.csv")
    assert set(d.sweep) == {"n", "W"} and d.scheduling_time_s.notna().any()
    e = pd.read_csv(out / "e_pipeline_timeline.csv")
    assert {"F", "B"} <= set(e.category)
    f = pd.read_csv(out / "f_speedup_vs_cluster_size.csv")
    assert f.num_gpus.nunique() >= 2
    g = pd.read_csv(out / "g_efficiency.csv")  # the scenario's policies and the literature's, each ≤ bound
    assert set(g.policy) == {"static-cp", "mcore-dcp", "dp-balanced", "wlb-llm", "flexsp", "distca"}
    assert g.ok.all() and ((g.efficiency > 0) & (g.efficiency <= 1)).all()
    assert ((g.efficiency - g.bound_s / g.iteration_time_s).abs() <= 1e-12 * g.efficiency).all()
    h = pd.read_csv(out / "h_stragglers.csv", keep_default_na=False)  # quick grid: f = 1, 1.5, 3
    assert set(h.factor) == {1.0, 1.5, 3.0} and set(h.model) == {"one slow rank", "random stragglers"}
    assert h.ok.all() and set(h[h.factor == 3.0].slow_ranks) == {"s1r1=3", ""}
    for (_model, pol, _seed), d in h.groupby(["model", "policy", "seed"]):  # stragglers never speed a plan up
        t = d.sort_values("factor").iteration_time_s.to_numpy()
        assert (np.diff(t) >= -1e-12).all() and t[-1] > t[0], (pol, t)


def test_select_and_bad_only():
    assert [m.KEY for m in select("c,a")] == ["a", "c"]
    assert [m.KEY for m in select("b_bubbles")] == ["b"]
    with pytest.raises(ScenarioError, match="unknown figure 'z'"):
        select("z")
    assert main(["figures", "--only", "z", "-o", "/nonexistent"]) == 2


def _tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return load_scenario(str(path))


def test_a_runs_several_seeds_and_draws_their_spread(figures, tmp_path):
    from matplotlib.container import ErrorbarContainer

    from dcpsim.experiments.figures import common, throughput

    _, out = figures
    a = pd.read_csv(out / "a_throughput_vs_context.csv")
    assert sorted(a.seed.unique()) == [0, 1] == list(range(common.QUICK_SEEDS))
    assert len(a) == 2 * 2 * 2  # contexts × seeds × policies
    fig = throughput.plot(a, _tiny(tmp_path))
    ax = fig.axes[0]
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers)
    ok = a[a.ok & (a.policy == "mcore-dcp")]
    bars = [p.get_height() for p in ax.patches if np.isfinite(p.get_height()) and p.get_height() > 0]
    for c, d in ok.groupby("context_len"):   # a bar is the mean over the seeds
        assert any(abs(h - d.tokens_per_s_per_gpu.mean()) < 1e-6 * h for h in bars), c
    assert "mean of 2 trace seeds" in ax.get_title()


def test_b_totals_sit_on_their_bars(figures, tmp_path):
    from dcpsim.experiments.figures import bubbles

    _, out = figures
    b = pd.read_csv(out / "b_bubbles.csv")
    ax = bubbles.plot(b).axes[0]
    per_bar = (100 * (b.pipeline_bubble + b.dp_bubble)).groupby([b.scenario, b.policy])
    worst_rank = (100 * b.pipeline_bubble_max).groupby([b.scenario, b.policy]).mean()
    # above the whisker (the highest seed's total) and the worst rank's diamond (its mean over the seeds)
    ys = sorted(t.get_position()[1] for t in ax.texts)
    above = np.maximum(per_bar.max(), worst_rank).dropna()
    assert ys == pytest.approx(sorted(v + 1.0 for v in above))
    texts = sorted(t.get_text() for t in ax.texts)        # the label: the mean total over the seeds
    assert texts == sorted(f"{v:.0f}%" for v in per_bar.mean().dropna())


# every policy comparison: its CSV stem, the columns naming one plotted point and the plotted columns
COMPARISONS = {"a": ("a_throughput_vs_context", ["policy", "context_len"], ["tokens_per_s_per_gpu"]),
               "b": ("b_bubbles", ["scenario", "policy"], ["bubble_total", "pipeline_bubble", "dp_bubble",
                                                     "pipeline_bubble_max"]),
               "f": ("f_speedup_vs_cluster_size", ["policy", "num_gpus"], ["speedup", "tokens_per_s_per_gpu"]),
               "g": ("g_efficiency", ["scenario", "policy"], ["efficiency"]),
               "h": ("h_stragglers", ["model", "policy", "factor"], ["tokens_per_s_per_gpu"])}


@pytest.mark.parametrize("key", sorted(COMPARISONS))
def test_policy_comparisons_run_several_seeds_and_carry_their_spread(figures, key):
    from dcpsim.experiments.figures import common

    _, out = figures
    stem, point, columns = COMPARISONS[key]
    df = pd.read_csv(out / f"{stem}.csv", keep_default_na=False, na_values=["", "NaN", "nan"])
    assert sorted(df.seed.unique()) == list(range(common.QUICK_SEEDS))
    sizes = df.groupby(point).seed.nunique()
    assert (sizes == common.QUICK_SEEDS).all() and len(df) == len(sizes) * common.QUICK_SEEDS
    # the seeds draw different traces: somewhere the plotted value differs between seeds of one point
    assert (df.groupby(point)[columns[0]].nunique() > 1).any()
    for col in columns:
        g = df.groupby(point)[col]
        for stat in ("mean", "min", "max"):
            want = g.transform(stat).where(g.transform("count") == common.QUICK_SEEDS)
            got = df[f"{col}_seed_{stat}"]
            assert np.allclose(got, want, equal_nan=True, rtol=1e-12), (col, stat)
        lo, mean, hi = (df[f"{col}_seed_{stat}"] for stat in ("min", "mean", "max"))
        ok = mean.notna()
        assert ok.any() and (lo[ok] <= mean[ok] + 1e-12).all() and (mean[ok] <= hi[ok] + 1e-12).all()


def test_spread_columns_keep_the_metrics_own_max_columns(figures):
    from dcpsim.experiments.figures.common import with_spread

    _, out = figures
    b = pd.read_csv(out / "b_bubbles.csv")
    ok = b[b.ok]   # each row keeps its own seed's worst rank, at least the mean rank's bubble
    assert (ok.pipeline_bubble_max >= ok.pipeline_bubble - 1e-12).all()
    df = pd.DataFrame({"policy": ["x", "x"], "seed": [0, 1], "v": [1.0, 3.0], "v_seed_max": [0.0, 0.0]})
    with pytest.raises(ValueError, match="'v_seed_max' would overwrite"):
        with_spread(df, ["policy"], ["v"])
    got = with_spread(df.drop(columns="v_seed_max"), ["policy"], ["v"])
    assert list(got.v_seed_mean) == [2.0, 2.0] and list(got.v_seed_min) == [1.0, 1.0]
    assert list(got.v_seed_max) == [3.0, 3.0]


def test_policy_comparisons_draw_the_spread(figures, tmp_path):
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    from dcpsim.experiments.figures import bubbles, efficiency, scaling, stragglers

    _, out = figures
    sc = _tiny(tmp_path)
    read = {k: pd.read_csv(out / f"{v[0]}.csv", keep_default_na=False, na_values=["", "NaN", "nan"])
            for k, v in COMPARISONS.items()}
    bars = {"b": bubbles.plot(read["b"]), "g": efficiency.plot(read["g"], [sc])}
    bands = {"f": scaling.plot(read["f"], sc), "h": stragglers.plot(read["h"], sc)}
    for key, fig in bars.items():
        ax = fig.axes[0]
        assert any(isinstance(c, ErrorbarContainer) for c in ax.containers), key
        assert "mean of 2 trace seeds" in ax.get_title(), key
    g = read["g"]   # g's bars are the mean efficiency over the seeds
    heights = [p.get_height() for p in bars["g"].axes[0].patches if np.isfinite(p.get_height())]
    for v in g.groupby(["scenario", "policy"]).efficiency.mean().dropna():
        assert any(abs(h - v) <= 1e-9 for h in heights), v
    for key, fig in bands.items():
        assert all(any(isinstance(c, PolyCollection) for c in ax.collections) for ax in fig.axes), key
        assert "mean of 2 trace seeds; bands: min–max" in fig.texts[0].get_text(), key
    h = read["h"]   # h's lines are the mean throughput over the seeds
    line = next(ln for ln in bands["h"].axes[0].get_lines() if ln.get_label() == "mcore-dcp")
    want = h[(h.model == "one slow rank") & (h.policy == "mcore-dcp")].groupby("factor").tokens_per_s_per_gpu.mean()
    assert np.allclose(line.get_ydata(), want.sort_index().to_numpy())


def test_c_skew_stands_alone_without_the_figure_letter_and_counts_microbatches(figures, tmp_path):
    from dcpsim.experiments.figures import skew

    _, out = figures
    c = pd.read_csv(out / "c_tokens_vs_time.csv")
    assert skew.plot(c, _tiny(tmp_path)).texts[0].get_text().startswith("(c) ")
    fig = skew.plot(c, _tiny(tmp_path), figure_label="")
    assert fig.texts[0].get_text().startswith("Per-rank tokens")
    cbar = fig.axes[-1]
    lo, hi = cbar.get_ylim()
    ticks = [t for t in cbar.get_yticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_d_names_the_job_that_ran_and_labels_several_log_ticks(figures, tmp_path):
    from dcpsim.experiments.figures import scheduling

    _, out = figures
    d = pd.read_csv(out / "d_scheduling_time.csv")
    assert "scenario" not in d and set(d.trace) == {"32k"}
    fig = scheduling.plot(d, _tiny(tmp_path))
    fig.canvas.draw()
    assert f"on {d.gpu.iloc[0].upper()} (the job that ran)" in fig.texts[0].get_text()
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        labelled = [t for t in ax.yaxis.get_major_ticks() if lo <= t.get_loc() <= hi and t.label1.get_text()]
        assert len(labelled) >= 2


def test_f_legend_sits_outside_the_panels_and_h_starts_at_zero(figures, tmp_path):
    from dcpsim.experiments.figures import scaling, stragglers

    _, out = figures
    f = pd.read_csv(out / "f_speedup_vs_cluster_size.csv")
    fig = scaling.plot(f, _tiny(tmp_path))
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    h = pd.read_csv(out / "h_stragglers.csv", keep_default_na=False)
    assert stragglers.plot(h, _tiny(tmp_path)).axes[0].get_ylim()[0] == 0


def test_calibration_plot_series_styles_differ():
    from dcpsim.experiments.calibration.report import _series_style

    styles = [(_series_style(i)[0], _series_style(i)[1]) for i in range(40)]
    assert len(set(styles)) == 40
    assert len({s[0] for s in styles[:20]}) == 20   # 20 distinct colours before any repeats
