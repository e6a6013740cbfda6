"""Interleaved (virtual-pipeline) 1F1B: the closed-form bubble, an independent list-scheduling re-implementation
of Megatron's schedule that reproduces every operation's start and end, the cost split over virtual stages,
activation memory in flight, and the constraints.

The reference below is written from Megatron-Core's ``megatron/core/pipeline_parallel/schedules.py``
(``get_schedule_table``, ``get_pp_rank_microbatches``, the warm-up / steady / cool-down loops of
``forward_backward_pipelining_with_interleaving`` and ``..._without_interleaving``, and the checks on
``microbatch_group_size_per_vp_stage``), not from ``policies.pipeline_order``: a rank's backward takes the oldest
forward of its chunk from a FIFO (Megatron's ``input_tensors[chunk].pop(0)``), not a position formula.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, get_model
from dcpsim.cost_models.errors import SpecError
from dcpsim.policies import CPGroup, Engine, make_plan
from dcpsim.policies.errors import PlanError
from dcpsim.policies.flatten import flatten
from dcpsim.policies.pipeline_order import interleaved_group_size, rank_order, schedule_table
from dcpsim.sim.engine import _op_costs, execute
from dcpsim.sim.simulate import peak_tokens_in_flight, simulate_plan
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job
from tests.sim.test_engine import uniform_plan


# ---- the reference, from Megatron's source -------------------------------------------------------------------
def megatron_group_size(p: int, m: int) -> int:
    """The smallest microbatch_group_size_per_vp_stage N ≥ p (Megatron's default N = p) that passes Megatron's two
    checks: ValueError unless p ≤ N ≤ m; RuntimeError if 0 < m % N < p."""
    for n in range(p, m + 1):
        if not (n > m or n < p) and not (0 < m % n < p):
            return n
    raise AssertionError("no group size: m < p")


def megatron_schedule_table(m: int, vpp: int, n: int) -> list[tuple[int, int]]:
    """get_schedule_table: (microbatch, chunk) per virtual microbatch id."""
    table = []
    for lo in range(0, m, n):
        hi = min(m, lo + n)
        table += [(mb, c) for c in range(vpp) for mb in range(lo, hi)]
    return table


def megatron_rank_ops(p: int, r: int, m: int, vpp: int) -> list[tuple[int, int, int]]:
    """(phase, microbatch, chunk) in the order rank r of p runs them (phase 0 forward, 1 backward)."""
    if vpp == 1:  # forward_backward_pipelining_without_interleaving
        table, warmup = [(mb, 0) for mb in range(m)], min(p - r - 1, m)
    else:  # get_pp_rank_microbatches
        n = megatron_group_size(p, m)
        table = megatron_schedule_table(m, vpp, n)
        warmup = min((p - r - 1) * 2 + (vpp - 1) * n, m * vpp)
    total = len(table)
    waiting: list[list[int]] = [[] for _ in range(vpp)]  # input_tensors[chunk]: forwards awaiting a backward
    ops: list[tuple[int, int, int]] = []

    def forward(k: int) -> None:
        mb, c = table[k]
        waiting[c].append(mb)
        ops.append((0, mb, c))

    def backward(k: int) -> None:
        c = vpp - 1 - table[k][1]  # get_model_chunk_id(k, forward=False)
        ops.append((1, waiting[c].pop(0), c))

    for k in range(warmup):
        forward(k)
    for k in range(total - warmup):  # steady state: forward, then backward
        forward(k + warmup)
        backward(k)
    for k in range(total - warmup, total):  # cool-down
        backward(k)
    return ops


def reference_times(plan, lengths: dict[int, int], p: int, vpp: int, fwd_s_per_token: float, pp_s: float):
    """List scheduling of the plan's operations: an operation (virtual stage k = c·p + r, group, phase) starts when
    each member's previous operation on rank r has ended and the previous virtual stage's forward (next one's
    backward) has ended plus ``pp_s``. Returns {(k, group, phase): (start, end)}."""
    groups = []  # (microbatch, ranks, seconds of a forward of one chunk)
    for i, mb in enumerate(plan.microbatches):
        for grp in mb.groups:
            tpr = sum(lengths[s] for s in grp.seq_ids) / len(grp.ranks)
            groups.append((i, grp.ranks, tpr * fwd_s_per_token / vpp))
    m, n = plan.num_microbatches, p * vpp
    deps: dict[tuple[int, int, int], list[tuple[tuple[int, int, int], float]]] = {}
    for g, _group in enumerate(groups):
        for k in range(n):
            deps[(k, g, 0)] = [((k - 1, g, 0), pp_s)] if k > 0 else []
            deps[(k, g, 1)] = [((k + 1, g, 1), pp_s)] if k < n - 1 else []
    for r in range(p):
        ops = megatron_rank_ops(p, r, m, vpp)
        for rank in range(plan.pool_size):
            mine = {i: g for g, (i, ranks, _) in enumerate(groups) if rank in ranks}
            seq = [(c * p + r, mine[mb], ph) for ph, mb, c in ops if mb in mine]
            for a, b in itertools.pairwise(seq):
                deps[b].append((a, 0.0))
    times: dict[tuple[int, int, int], tuple[float, float]] = {}
    while len(times) < len(deps):
        progress = False
        for op, ds in deps.items():
            if op in times or any(d not in times for d, _ in ds):
                continue
            start = max((times[d][1] + delay for d, delay in ds), default=0.0)
            f = groups[op[1]][2]
            times[op] = (start, start + (f if op[2] == 0 else 2.0 * f))
            progress = True
        assert progress, "the reference schedule deadlocked"
    return times


def random_plan(rng: np.random.Generator, pool: int, m: int):
    """m microbatches of random CP groups over random subsets of the pool (disjoint in a microbatch), 1–3
    sequences each."""
    mbs, lengths, sid = [], [], 0
    for _ in range(m):
        ranks = [int(x) for x in rng.permutation(pool)[: rng.integers(1, pool + 1)]]
        groups = []
        while ranks:
            c = int(rng.integers(1, len(ranks) + 1))
            members, ranks = tuple(ranks[:c]), ranks[c:]
            k = int(rng.integers(1, 4))
            ids = tuple(range(sid, sid + k))
            sid += k
            lengths += [int(x) for x in rng.integers(64, 4096, size=k)]
            groups.append(CPGroup(members, ids, Engine.for_size("ring", c)))
        mbs.append(groups)
    return make_plan("random", pool, mbs), GlobalBatch.of(lengths)


# ---- the tests --------------------------------------------------------------------------------------------------
def test_schedule_table_is_megatrons_example():
    """Megatron's ModelParallelConfig docstring: PP 2, VP 2; N = 2, m = 4 gives 0 1 0 1 2 3 2 3 and N = 3,
    m = 5 gives 0 1 2 0 1 2 3 4 3 4 (m = 5 needs N = 3: 5 mod 2 = 1 < p)."""
    assert schedule_table(4, 2, 2)[0].tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    mb, chunk = schedule_table(5, 2, 3)
    assert mb.tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert chunk.tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert [interleaved_group_size(2, m, 2) for m in (4, 5, 6, 7)] == [2, 3, 2, 4]
    assert [interleaved_group_size(4, m, 2) for m in (4, 8, 9, 10, 11, 12)] == [4, 4, 5, 5, 6, 4]


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("vpp", [1, 2, 3, 4])
def test_rank_order_is_megatrons_loop(p, vpp):
    for m in range(1 if vpp == 1 else p, 3 * p + 2):
        for r in range(p):
            phase, mb, chunk = rank_order(r, p, m, vpp)
            assert list(zip(phase.tolist(), mb.tolist(), chunk.tolist())) == megatron_rank_ops(p, r, m, vpp)


@pytest.mark.parametrize("p,vpp,m", [(2, 2, 4), (4, 2, 8), (4, 4, 8), (4, 2, 4), (8, 2, 16), (4, 3, 12),
                                     (4, 2, 10), (4, 2, 7), (3, 2, 6)])
def test_uniform_microbatches_give_the_interleaved_bubble(p, vpp, m):
    """(p − 1)/(V·m + p − 1) with no communication, also where m is not a multiple of p (Megatron's group size
    chosen so that the schedule is legal: 10 → N = 5, 7 → N = 7 at p = 4)."""
    plan, batch = uniform_plan(4, m)
    cm = ConstantCostModel(small_job(model=replace(get_model("llama3-8b"), layers=4 * p * vpp), pp=p, pool=4, vpp=vpp))
    res = simulate_plan(plan, batch, cm)
    expected = (p - 1) / (vpp * m + p - 1)
    assert res.metrics.pipeline_bubble == pytest.approx(expected, rel=1e-9)
    assert res.metrics.pipeline_bubble_max == pytest.approx(expected, rel=1e-9)
    # iteration = (m + (p − 1)/V)(t_f + t_b) with t_f = 1 ms, t_b = 2 ms per stage
    assert res.metrics.iteration_time_s == pytest.approx((m + (p - 1) / vpp) * 3e-3)
    # interleaving shortens the non-interleaved bubble (p − 1)/(m + p − 1)
    assert res.metrics.pipeline_bubble < (p - 1) / (m + p - 1)


@pytest.mark.parametrize("seed", range(20))
def test_engine_reproduces_an_independent_list_schedule(seed):
    rng = np.random.default_rng(seed)
    p = int(rng.choice([2, 3, 4]))
    vpp = int(rng.choice([1, 2, 3, 4]))
    m = int(rng.integers(p, 3 * p + 1)) if vpp > 1 else int(rng.integers(1, 9))
    pool = int(rng.integers(1, 6))
    pp_s = float(rng.choice([0.0, 1e-4, 7e-4]))
    plan, batch = random_plan(rng, pool, m)
    job = small_job(model=replace(get_model("llama3-8b"), layers=4 * p * vpp), pp=p, pool=pool, vpp=vpp)
    cm = ConstantCostModel(job, pp_s=pp_s)
    fp = flatten(plan, batch)
    ot = execute(fp, cm, p)
    ref = reference_times(plan, dict(zip(batch.seq_ids.tolist(), batch.lengths.tolist())), p, vpp, 1e-6, pp_s)
    G = fp.num_groups
    assert len(ot.start) == len(ref) == 2 * p * vpp * G
    for (k, g, ph), (start, end) in ref.items():
        op = (k * G + g) * 2 + ph
        assert ot.start[op] == pytest.approx(start, rel=1e-12, abs=1e-15), (k, g, ph)
        assert ot.end[op] == pytest.approx(end, rel=1e-12, abs=1e-15), (k, g, ph)


def test_virtual_stages_split_their_rank_and_hold_the_ends():
    """Analytic costs: each chunk is 1/V of its rank's stage without the ends; the embedding sits on virtual stage
    0, the LM head on virtual stage p·V − 1, so each rank's chunks add up to its stage's costs."""
    p, vpp = 4, 2
    job = small_job(pp=p, pool=4, vpp=vpp, tp=2)
    cm = AnalyticCostModel(job)
    plan, batch = uniform_plan(4, 4, c=2)
    fp = flatten(plan, batch)
    comp_v, comm_v, xfer_v, tp_v, _ = _op_costs(fp, cm, p, None, vpp)
    comp, comm, xfer, tp, _ = _op_costs(fp, cm, p, None, 1)
    by_rank = comp_v.reshape(vpp, p, *comp_v.shape[1:]).sum(axis=0)
    np.testing.assert_allclose(by_rank, comp, rtol=1e-12)
    np.testing.assert_allclose(tp_v.reshape(vpp, p, *tp_v.shape[1:]).sum(axis=0), tp, rtol=1e-12)
    np.testing.assert_allclose(comm_v.reshape(vpp, p, *comm_v.shape[1:]).sum(axis=0), comm, rtol=1e-12)
    tpr = fp.groups.tokens_per_rank()
    emb_f = cm.ends_s(tpr, 0)[0]
    head_f = cm.ends_s(tpr, p - 1)[0]
    assert (emb_f > 0).all() and (head_f > 0).all()
    middle = comp[1, :, 0] / vpp  # stage 1 has no ends
    np.testing.assert_allclose(comp_v[0, :, 0], (comp[0, :, 0] - emb_f) / vpp + emb_f, rtol=1e-12)
    np.testing.assert_allclose(comp_v[p, :, 0], (comp[0, :, 0] - emb_f) / vpp, rtol=1e-12)  # rank 0, chunk 1
    np.testing.assert_allclose(comp_v[p * vpp - 1, :, 0], (comp[p - 1, :, 0] - head_f) / vpp + head_f, rtol=1e-12)
    np.testing.assert_allclose(comp_v[1, :, 0], middle, rtol=1e-12)
    np.testing.assert_allclose(comp_v[p + 1, :, 0], middle, rtol=1e-12)
    # transfers: r → r + 1 as the stage's; the wrap-around (rank p − 1, chunk 0 → rank 0, chunk 1) the largest
    np.testing.assert_allclose(xfer_v[:p - 1], xfer[:p - 1])
    np.testing.assert_allclose(xfer_v[p - 1], xfer[:p - 1].max(axis=0))
    assert (xfer_v[-1] == 0).all()


def test_activations_in_flight_follow_the_interleaved_warmup():
    """Rank r holds 2(p − r − 1) + (V − 1)·p + 1 chunk forwards at its peak, each 1/V of the stage's layers."""
    p, vpp = 4, 2
    plan, batch = uniform_plan(2, 8)
    peak = peak_tokens_in_flight(flatten(plan, batch), p, vpp)
    expected = [(2 * (p - r - 1) + (vpp - 1) * p + 1) * 1000 / vpp for r in range(p)]
    assert peak[:, 0].tolist() == expected  # 5500, 4500, 3500, 2500 against 1F1B's 4000 … 1000
    assert peak_tokens_in_flight(flatten(plan, batch), p).tolist() == [[4000.0] * 2, [3000.0] * 2,
                                                                       [2000.0] * 2, [1000.0] * 2]


def test_bound_stays_below_interleaved_iterations():
    """At V > 1 the reported bound (interleaved fill and drain: tests/sim/test_bound_interleaved.py) stays below."""
    plan, batch = uniform_plan(4, 8)
    for vpp in (1, 2, 4):
        cm = ConstantCostModel(small_job(pp=4, pool=4, vpp=vpp))
        res = simulate_plan(plan, batch, cm)
        assert 0 < res.metrics.bound_s <= res.metrics.iteration_time_s * (1 + 1e-9)


def test_too_few_microbatches_is_one_plan_error():
    plan, batch = uniform_plan(4, 3)
    cm = ConstantCostModel(small_job(pp=4, pool=4, vpp=2))
    with pytest.raises(PlanError, match=r"plan.num_microbatches = 3 is invalid with job.vpp = 2: .* pp = 4"):
        simulate_plan(plan, batch, cm)


@pytest.mark.parametrize("kw,msg", [({"vpp": 0}, r"job.vpp = 0 is invalid: a positive integer"),
                                    ({"vpp": 2, "pp": 1}, r"job.vpp = 2 is invalid: 1 at job.pp = 1"),
                                    ({"vpp": 3, "pp": 4}, r"job.vpp = 3 is invalid: pp · vpp = 12 must divide")])
def test_job_vpp_is_validated(kw, msg):
    with pytest.raises(SpecError, match=msg):
        small_job(**kw)


def test_vpp_layer_split():
    job = small_job(pp=4, vpp=2)
    assert (job.stage_layers(0), job.split[0][0]) == (8, 4)
    assert small_job(pp=4).split[0][0] == 8


def test_vpp_reaches_the_job_from_the_scenario_and_the_cli(capsys):
    from dcpsim.experiments.cli import main
    from dcpsim.experiments.scenario.definition import Scenario

    sc = Scenario().with_(vpp=2)
    assert sc.job().vpp == 2 and sc.to_dict()["vpp"] == 2
    assert "vpp" not in Scenario().to_dict()  # V = 1 outputs are those of before the field
    code = main(["compare", "--vpp", "3", "--policies", "static-cp", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["dcpsim compare: error: job.vpp = 3 is invalid: pp · vpp = 12 must divide model.layers = 32"]
