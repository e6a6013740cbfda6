"""A measured run becomes a ``sim.timeline.Timeline`` and goes through ``sim.metrics.compute_metrics``: one
2-process gloo run of ``tiny`` (a hand-made plan with a CP group of 2 and two groups of 1, one iteration),
then the metrics checked against the measured rows and the batch by hand."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import CPGroup, Engine, make_plan, validate_plan
from dcpsim.real_runtime.run import run_workloads
from dcpsim.real_runtime.runner import TrainConfig
from dcpsim.real_runtime.session import TIMELINE_COLUMNS, measured_timelines, write_outputs
from dcpsim.real_runtime.workload import Step, Workload
from dcpsim.sim.metrics import compute_metrics
from dcpsim.sim.timeline import COLUMNS, Timeline, TimelineError
from dcpsim.traces.batching import GlobalBatch

BATCH = GlobalBatch.of([300, 100, 200, 60, 90], ids=[20, 21, 22, 23, 24])
PLAN = make_plan("manual", 2, [
    [CPGroup((0, 1), (20, 21), Engine.for_size("ring", 2))],  # (300 + 100) / 2 = 200 tokens on each rank
    [CPGroup((0,), (22,), Engine()), CPGroup((1,), (23, 24), Engine())],  # 200 on rank 0, 150 on rank 1
])
TOKENS = {(0, 0): 200.0, (1, 0): 200.0, (0, 1): 200.0, (1, 1): 150.0}  # (rank, microbatch): Σ L / degree


def job() -> JobSpec:
    return JobSpec(model=get_model("tiny"), gpu=get_gpu("h200"), tp=1, pp=1, pool=2, context_len=512,
                   global_batch_tokens=1024, max_tokens_per_rank=512)


@pytest.fixture(scope="module")
def measured():
    validate_plan(PLAN, BATCH, max_tokens_per_rank=512)
    cfg = TrainConfig(model="tiny", seed=1, attention_backend="math")
    res = run_workloads([Workload("manual", (Step(BATCH, PLAN),))], cfg, nproc=2, backend="gloo",
                        timeout_s=240)
    return res, res.timelines()


def test_the_run_is_one_timeline_per_iteration(measured):
    res, tls = measured
    assert list(tls) == [("manual", 0)]
    tl = tls[("manual", 0)]
    assert isinstance(tl, Timeline) and (tl.num_stages, tl.pool_size) == (1, 2)
    assert tuple(res.timeline.columns) == TIMELINE_COLUMNS and TIMELINE_COLUMNS[2:] == COLUMNS
    assert len(tl) == len(res.timeline)
    assert np.array_equal(tl["end"], res.timeline["end"].to_numpy())


def test_compute_metrics_on_the_measured_timeline(measured):
    res, tls = measured
    tl = tls[("manual", 0)]
    cm = AnalyticCostModel(job())
    m = compute_metrics(tl, tokens=BATCH.num_tokens, model_flops=cm.model_flops(BATCH.lengths), num_gpus=2,
                        peak_tflops=job().gpu.peak_bf16_tflops, peak_memory_gib=0.0,  # memory: not measured
                        num_microbatches=PLAN.num_microbatches)
    T = float(res.timeline["end"].max())
    assert T > 0 and m.iteration_time_s == T  # the latest end: the slower rank's optimizer step
    assert m.tokens == 750 and m.tokens_per_s == pytest.approx(750 / T)
    assert m.tokens_per_s_per_gpu == pytest.approx(750 / T / 2)
    assert m.num_microbatches == 2

    dur = tl.duration
    per_rank = {k: np.bincount(tl["rank"], weights=np.where(mask, dur, 0.0), minlength=2)
                for k, mask in {"compute": tl["kind"] == "compute",
                                "cp": (tl["kind"] == "comm") & (tl["comm"] == "cp"),
                                "dp": (tl["kind"] == "comm") & (tl["comm"] == "dp"),
                                "idle": tl["kind"] == "idle"}.items()}
    assert np.all(per_rank["compute"] > 0) and np.all(per_rank["dp"] > 0)  # both ranks trained and synced
    busy = per_rank["compute"] + per_rank["cp"] + per_rank["dp"] + per_rank["idle"]
    assert m.pipeline_bubble == pytest.approx(float(np.mean(np.clip((T - busy) / T, 0, 1))))
    assert m.dp_bubble == pytest.approx(float(np.mean(per_rank["idle"] / T)))
    assert m.cp_comm_s == pytest.approx(float(np.mean(per_rank["cp"])))
    # Only rank-microbatches in the CP group can have exposed CP time.
    cp_rows = tl["comm"] == "cp"
    assert set(zip(tl["rank"][cp_rows].tolist(), tl["microbatch"][cp_rows].tolist())) <= {(0, 0), (1, 0)}
    # The skew is max/min compute over the ranks of a microbatch: microbatch 1 runs on both ranks.
    comp = tl["kind"] == "compute"
    mb_comp = {(r, k): float(dur[comp & (tl["rank"] == r) & (tl["microbatch"] == k)].sum())
               for r, k in TOKENS}
    skews = [max(mb_comp[(0, k)], mb_comp[(1, k)]) / min(mb_comp[(0, k)], mb_comp[(1, k)]) for k in (0, 1)]
    assert m.microbatch_skew_max == pytest.approx(max(skews))


def test_measured_rows_carry_the_plans_tokens(measured):
    _, tls = measured
    tl = tls[("manual", 0)]
    rows = (tl["kind"] == "compute") & (tl["microbatch"] >= 0)
    got = {(int(r), int(k)): float(t)
           for r, k, t in zip(tl["rank"][rows], tl["microbatch"][rows], tl["tokens"][rows])}
    assert got == TOKENS
    assert sorted(tl["phase"][rows & (tl["rank"] == 1)].tolist()) == ["B", "B", "F", "F"]
    last = {r: str(tl["phase"][np.flatnonzero(tl["rank"] == r)[np.argmax(tl["end"][tl["rank"] == r])]])
            for r in (0, 1)}
    assert last == {0: "S", 1: "S"}  # each rank's last operation is its sync / optimizer step


def test_rank_zero_refuses_rows_outside_the_schema(tmp_path):
    good = {"workload": "w", "iteration": 0, "stage": 0, "rank": 0, "microbatch": 0, "phase": "F",
            "kind": "compute", "comm": "", "start": 0.0, "end": 1.0, "tokens": 10.0}
    wl = Workload("w", (Step(GlobalBatch.of([10]), make_plan("w", 1, [[CPGroup((0,), (0,), Engine())]])),))
    pool = SimpleNamespace(world=1, created=[], keys=[])
    write_outputs(tmp_path / "ok", [wl], [{"w": {"losses": [1.0], "rows": [good]}}], pool)
    back = pd.read_csv(tmp_path / "ok" / "timeline.csv", keep_default_na=False)
    assert list(measured_timelines(back, 1)) == [("w", 0)]
    bad = [{"w": {"losses": [1.0], "rows": [good | {"kind": "run"}]}}]
    with pytest.raises(TimelineError, match=r"measured timeline of 'w', iteration 0: row 0, column 'kind' = 'run'"):
        write_outputs(tmp_path / "bad", [wl], bad, pool)
    assert not (tmp_path / "bad").exists()  # nothing written
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['workload'\]"):
        measured_timelines(back.drop(columns="workload"), 1)
