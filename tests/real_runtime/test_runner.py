"""The runner on 4 gloo processes: plans of every policy (and a hand-made plan using every engine and a
non-aligned group) train ``tiny`` for 2 iterations, and the losses match a single-process run.

One spawn runs every workload (``run_workloads`` with several workloads); the tests read its outputs.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import CPGroup, Engine, available_policies, make_plan
from dcpsim.real_runtime.run import run_workloads
from dcpsim.real_runtime.runner import TrainConfig, reference_losses, relative_errors
from dcpsim.real_runtime.session import TIMELINE_COLUMNS
from dcpsim.real_runtime.workload import Step, Workload, plan_workload
from dcpsim.traces.batching import GlobalBatch

POLICIES = ("static-cp", "mcore-dcp", "hydra")
TOL = 1e-4
BATCHES = (GlobalBatch.of([500, 37, 128, 90, 256, 5, 300, 64, 1, 200]),
           GlobalBatch.of([150, 400, 20, 77, 260, 33], ids=range(10, 16), step=1))
CFG = TrainConfig(model="tiny", seed=3, optimizer="adamw", lr=1e-2, attention_backend="math")


def job() -> JobSpec:
    return JobSpec(model=get_model("tiny"), gpu=get_gpu("h200"), tp=1, pp=1, pool=4, context_len=512,
                   global_batch_tokens=2048, max_tokens_per_rank=128)


def manual_workload() -> Workload:
    """Every engine kind and a group that is not aligned to its size, by hand."""
    b0, b1 = BATCHES
    e = Engine.for_size
    p0 = make_plan("manual", 4, [
        [CPGroup((0, 1), (0, 1), e("ulysses", 2)), CPGroup((2, 3), (2, 3), e("ring", 2))],
        [CPGroup((0, 1, 2, 3), (4, 5, 6), e("hybrid", 4, 2))],
        [CPGroup((0,), (7, 8), e("ring", 1)), CPGroup((1, 2), (9,), e("ring", 2))],
    ])
    p1 = make_plan("manual", 4, [[CPGroup((0, 1, 2, 3), (10, 11, 12, 13, 14, 15), e("ring", 4))]])
    return Workload("manual", (Step(b0, p0), Step(b1, p1)))


def workloads() -> tuple[list[Workload], list[str]]:
    cm = AnalyticCostModel(job())
    have = set(available_policies())
    out, skipped = [], [p for p in POLICIES if p not in have]
    for name in POLICIES:
        if name in have:
            out.append(plan_workload(name, BATCHES, cm))
    return out, skipped


@pytest.fixture(scope="module")
def run():
    wls, skipped = workloads()
    wls.append(manual_workload())
    res = run_workloads(wls, CFG, nproc=4, backend="gloo", timeout_s=240)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a busy core makes OpenMP's spinning threads crawl; one thread is plenty here
    try:
        refs = {w.label: reference_losses(w, CFG) for w in wls}
    finally:
        torch.set_num_threads(threads)
    return wls, res, refs, skipped


def losses_of(res, label):
    t = res.losses[res.losses.workload == label].sort_values("iteration")
    return t.loss.to_list()


@pytest.mark.parametrize("name", POLICIES + ("manual",))
def test_losses_match_single_process(run, name):
    _, res, refs, skipped = run
    if name in skipped:
        pytest.skip(f"policy {name!r} is not registered yet")
    got = losses_of(res, name)
    assert len(got) == 2 and np.all(np.isfinite(got))
    err = relative_errors(got, refs[name])
    print(f"{name}: distributed {got}, single-process {refs[name]}, max relative difference {err.max():.2e}")
    assert err.max() <= TOL
    assert got[0] != got[1]  # the optimizer stepped and the second batch differs


def test_plans_use_cp_groups(run):
    wls, _, _, _ = run
    for w in wls:
        sizes = {g.size for s in w.steps for mb in s.plan.microbatches for g in mb.groups}
        assert max(sizes) > 1, f"{w.label} used no CP group: {sizes}"
    engines = {str(g.engine) for s in wls[-1].steps for mb in s.plan.microbatches for g in mb.groups}
    assert {"ring", "ulysses", "hybrid(2,2)"} <= engines


def test_timeline_schema_and_rows(run):
    wls, res, _, _ = run
    tl = res.timeline
    assert tuple(tl.columns) == TIMELINE_COLUMNS
    assert (tl.end >= tl.start).all() and (tl.start >= 0).all() and (tl.stage == 0).all()
    for w in wls:
        for it, step in enumerate(w.steps):
            t = tl[(tl.workload == w.label) & (tl.iteration == it)]
            length = step.length_of()
            for k, mb in enumerate(step.plan.microbatches):
                for g in mb.groups:
                    tok = sum(length[s] for s in g.seq_ids) / g.size
                    for r in g.ranks:
                        rows = t[(t["rank"] == r) & (t.microbatch == k) & (t.kind == "compute")]
                        assert sorted(rows.phase) == ["B", "F"], (w.label, it, k, r)
                        assert np.allclose(rows.tokens, tok)
                    cp = t[t["rank"].isin(g.ranks) & (t.microbatch == k) & (t.comm == "cp")]
                    assert g.size > 1 or cp.empty
            sync = t[t.phase == "S"]
            assert sorted(sync[sync.comm == "dp"]["rank"]) == [0, 1, 2, 3]
            assert (sync.microbatch == -1).all()
            for r in range(4):  # one rank's rows do not overlap, and the sync comes last
                mine = t[t["rank"] == r].sort_values("start")
                assert (mine.start.to_numpy()[1:] >= mine.end.to_numpy()[:-1] - 1e-9).all()
                assert mine.phase.iloc[-1] == "S"


def test_pool_created_exactly_the_needed_groups(run):
    _, res, _, _ = run
    sets = [tuple(s) for s in res.pool["process_groups"]]
    assert len(sets) == len(set(sets))
    assert (1, 2) in sets and (0, 2) in sets and (1, 3) in sets  # non-aligned ring, hybrid's outer rings
    assert res.pool["world"] == 4
