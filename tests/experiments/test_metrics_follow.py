"""Every output that lists metrics follows the declarations on ``sim.metrics.Metrics``: the JSON of
``dcpsim compare`` / ``simulate``, the compare table's columns, sweep rows, figure rows, docs/metrics.md."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.figures.common import metrics_row
from dcpsim.experiments.output.tables import compare_columns, compare_table
from dcpsim.experiments.runner import RunSummary, memory_warning
from dcpsim.experiments.sweep.driver import run_sweep
from dcpsim.experiments.sweep.grid import load_sweep
from dcpsim.sim.metric_spec import MEAN, Column, metric, ratio
from dcpsim.sim.metrics import METRIC_NAMES, METRICS, Metrics

SMALL = ["--global-batch-tokens", "1048576", "--no-progress"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def metrics(cls: type = Metrics, **values) -> Metrics:
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**(dict.fromkeys(names, 1.0) | {"tokens": 1} | values))


def summary(policy: str, m: Metrics, gib: float = 141.0) -> RunSummary:
    return RunSummary(policy, m, iterations=1, num_gpus=64, gpu_memory_gib=gib)


@pytest.fixture(scope="module")
def compare_run():
    import io
    from contextlib import redirect_stdout

    outs = []
    for args in (["--json"], []):
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert main(["compare", *args, *SMALL, "--policies", "static-cp,mcore-dcp"]) == 0
        outs.append(buf.getvalue())
    return json.loads(outs[0]), outs[1]


def test_json_has_every_declared_metric_and_nothing_undeclared(compare_run):
    doc, _ = compare_run
    for r in doc["results"]:
        assert list(RunSummary.columns()) == ["policy", *METRIC_NAMES, "fits_memory"]
        assert set(r) == set(RunSummary.columns())
        assert r["scheduling_time_s"] == 0.0  # a wall-clock metric: zero without --timings
        assert isinstance(r["tokens"], int) and r["tokens_per_s"] * r["iteration_time_s"] == \
            pytest.approx(r["tokens"])


def test_table_columns_are_the_declared_table_metrics_in_order(compare_run):
    _, text = compare_run
    header = text.splitlines()[1]
    assert re.split(r"\s{2,}", header.strip()) == ["policy", *(d.table.header for d in compare_columns())]
    assert [d.name for d in compare_columns()] == [d.name for d in METRICS if d.table is not None]
    # the first version's columns keep their order (the table's text stays the same for them)
    first = ["iter s", "tok/s/GPU", "x first", "MFU", "PP bubble", "DP bubble", "mb skew max", "±10%-tok ratio",
             "CP comm s", "mbs", "sched ms", "peak GiB"]
    cells = re.split(r"\s{2,}", header.strip())
    assert [c for c in cells if c in first] == first


def test_compare_table_cells_by_hand():
    a = summary("a", metrics(iteration_time_s=21.036, tokens_per_s=200.0, tokens_per_s_per_gpu=3039.2, mfu=0.3131,
                             scheduling_time_s=0.0146, num_microbatches=16.0, peak_memory_gib=87.82))
    b = summary("b", metrics(tokens_per_s=300.0))
    lines = [re.split(r"\s{2,}", ln.strip()) for ln in compare_table([a, b]).splitlines()]
    row_a, row_b = dict(zip(lines[0], lines[2])), dict(zip(lines[0], lines[3]))
    assert row_a == row_a | {"policy": "a", "iter s": "21.04", "tok/s/GPU": "3,039", "x first": "1.00x",
                             "MFU": "31.3%", "PP bubble": "100.0%", "mb skew max": "1.00", "mbs": "16",
                             "sched ms": "14.6", "peak GiB": "87.8"}
    assert row_b["x first"] == "1.50x"  # throughput over the first row's


def test_a_new_metric_reaches_table_json_and_figure_rows():
    @dataclass(frozen=True)
    class WithOracle(Metrics):
        oracle_s: float = metric("s", MEAN, table=Column("oracle s", "{:.2f}"), default=0.0)
        oracle_share: float = metric("fraction", ratio("oracle_s", "iteration_time_s"),
                                     table=Column("oracle %", "{:.1%}"), default=0.0)

    s = summary("p", metrics(WithOracle, oracle_s=0.5, oracle_share=0.5))
    assert s.to_dict()["oracle_s"] == 0.5 and s.to_dict()["oracle_share"] == 0.5
    header = re.split(r"\s{2,}", compare_table([s]).splitlines()[0].strip())
    assert header[-2:] == ["oracle s", "oracle %"]
    row = metrics_row(SimpleNamespace(metrics=s.metrics), 64)
    assert row["oracle_s"] == 0.5 and row["ok"] is True


def test_figure_rows_hold_every_declared_metric():
    m = metrics(mfu=0.4)
    assert metrics_row(SimpleNamespace(metrics=m), 8) == m.to_dict() | {"ok": True}
    failed = metrics_row(None, 8)
    assert list(failed) == [*METRIC_NAMES, "ok"] and failed["ok"] is False


def test_fits_memory_and_the_warning_follow_peak_memory():
    ok, over = summary("p", metrics(peak_memory_gib=141.0)), summary("p", metrics(peak_memory_gib=150.0))
    assert ok.fits_memory and memory_warning(ok) is None
    assert not over.fits_memory and "p needs 150.0 GiB on some rank" in memory_warning(over)
    assert over.to_dict()["fits_memory"] is False


def test_sweep_rows_carry_the_declared_metrics_in_order(tmp_path):
    (tmp_path / "base.toml").write_text('model = "llama3-8b"\ngpu = "h200"\ntp = 1\npp = 2\npool = 4\n'
                                        'context_len = 32768\nglobal_batch_tokens = 131072\ntrace = "32k"\n')
    (tmp_path / "grid.toml").write_text('base = "base.toml"\npolicies = ["static-cp"]\n[set]\niterations = 1\n'
                                        '[grid]\nmax_tokens_per_rank = [16384, 100]\n')
    run_sweep(load_sweep(tmp_path / "grid.toml"), tmp_path / "out", workers=1)
    table = pd.read_parquet(tmp_path / "out" / "results.parquet")
    cols = list(table.columns)
    block = cols[cols.index(METRIC_NAMES[0]):cols.index(METRIC_NAMES[0]) + len(METRIC_NAMES) + 1]
    assert block == [*METRIC_NAMES, "fits_memory"]
    good, bad = table.iloc[0], table.iloc[1]
    assert good.error == "" and good.tokens_per_s > 0 and good.tokens > 0
    assert bad.error != "" and table.loc[1, list(METRIC_NAMES)].isna().all()  # a failed point: empty metrics


def test_docs_define_every_declared_metric():
    text = DOCS.read_text()
    missing = [n for n in METRIC_NAMES if f"`{n}`" not in text]
    assert missing == [], f"docs/metrics.md does not define {missing}"
