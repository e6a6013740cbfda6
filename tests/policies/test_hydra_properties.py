"""Property tests of the ``hydra`` policy over random batches, pools (including non-powers of two), pipeline
depths, budgets, engines and options: every plan is valid, every degree meets memory, every rank's load stays
within its microbatch's capacity, and, when no sequence is too heavy to balance, within (1 + tolerance) · τ."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies import PolicyError, create_policy, validate_plan
from dcpsim.policies.hydra import rank_loads
from dcpsim.policies.hydra.degrees import allowed_degrees, engine_options
from dcpsim.policies.hydra.pricing import group_overhead, sequence_work
from dcpsim.traces.batching import GlobalBatch


@st.composite
def cases(draw):
    model = draw(st.sampled_from(["llama3-8b", "tiny"]))
    pp = draw(st.sampled_from([1, 2, 4] if model == "llama3-8b" else [1, 2]))
    tp = draw(st.sampled_from([1, 2, 8] if model == "llama3-8b" else [1, 2]))
    pool = draw(st.integers(1, 40))
    budget = draw(st.integers(256, 65536))
    job = JobSpec(get_model(model), get_gpu(draw(st.sampled_from(["h100", "h200"]))), tp=tp, pp=pp, pool=pool,
                  max_tokens_per_rank=budget)
    cost_model = AnalyticCostModel(job) if draw(st.booleans()) else ConstantCostModel(job)
    n = draw(st.integers(1, 120))
    # Log-uniform lengths from 1 token to the whole pool's budget: mostly short, a few very long.
    exps = draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    top = pool * budget
    lengths = np.maximum(1, np.minimum(top, np.round(np.power(float(top), exps)))).astype(np.int64)
    ids = np.asarray(draw(st.permutations(range(3 * n)))[:n], dtype=np.int64) + 100
    options = {
        "degrees": draw(st.sampled_from(["pow2", "any"])),
        "cp_engine": draw(st.sampled_from(["auto", "auto", "ring", "hybrid"])),
        "tolerance": draw(st.sampled_from([0.0, 0.02, 0.05, 0.2])),
        "min_cp_size": draw(st.sampled_from([1, 1, 1, 2])),
        "num_microbatches": draw(st.one_of(st.none(), st.integers(1, 24))),
        "profile": draw(st.sampled_from([None, None, False, True])),
        "m_candidates": draw(st.sampled_from([None, None, 1, 4])),
    }
    return job, cost_model, GlobalBatch.of(lengths, ids=ids), options


def smallest_alone_load(lengths: np.ndarray, job: JobSpec, cost_model, options: dict, budget: int) -> np.ndarray:
    """Per sequence, the smallest load it can have alone in a group: over every allowed degree ≥ its memory
    minimum and every engine that degree allows (priced with HyDra's own work model)."""
    D = allowed_degrees(job.pool, options["degrees"], options["min_cp_size"], options["cp_engine"], job)
    best = np.full(len(lengths), np.inf)
    for c in D.tolist():
        for u in engine_options(c, options["cp_engine"], job):
            n = len(lengths)
            load = (sequence_work(lengths, np.full(n, c), np.full(n, u), cost_model)
                    + group_overhead(np.array([c]), np.array([u]), cost_model)[0])
            best = np.where(lengths <= budget * c, np.minimum(best, load), best)
    return best


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_hydra_plans_are_valid_and_balanced(case) -> None:
    job, cost_model, batch, options = case
    budget = job.max_tokens_per_rank
    try:
        plan = create_policy("hydra", **options).plan(batch, job, cost_model)
    except PolicyError as e:  # only for input that cannot be scheduled at all
        assert any(k in str(e) for k in ("largest allowed CP group", "can run", "min_cp_size")), str(e)
        assume(False)
        return
    validate_plan(plan, batch, max_tokens_per_rank=budget, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)
    assert plan.meta["max_tokens_per_rank"] == budget
    length = dict(zip(batch.seq_ids.tolist(), batch.lengths.tolist()))

    # Degrees: at least the memory minimum and min_cp_size; powers of two (or the pool) unless "any".
    for mb in plan.microbatches:
        tokens = np.zeros(job.pool)
        for g in mb.groups:
            assert g.ranks == tuple(range(g.ranks[0], g.ranks[0] + g.size))
            assert g.size >= options["min_cp_size"]
            if options["degrees"] == "pow2":
                assert g.size & (g.size - 1) == 0 or g.size == job.pool
                assert g.ranks[0] % g.size == 0 or g.size == job.pool  # aligned blocks
            for s in g.seq_ids:
                assert g.size >= math.ceil(length[s] / budget)
            tokens[list(g.ranks)] += sum(length[s] for s in g.seq_ids) / g.size
        assert tokens.max() <= budget * (1 + 1e-9)

    # Loads: within each microbatch's capacity; within (1 + tol)·τ when no sequence is too heavy.
    loads = rank_loads(plan, batch, cost_model)
    caps = np.asarray(plan.meta["microbatch_caps_s"])
    assert loads.shape == (plan.num_microbatches, job.pool)
    assert (loads.max(axis=1) <= caps * (1 + 1e-9)).all()
    tau, tol = plan.meta["target_s"], plan.meta["tolerance"]
    assert tol == options["tolerance"]
    if (smallest_alone_load(batch.lengths, job, cost_model, options, budget) <= tau).all():
        assert plan.meta["heavy_sequences"] == 0
        if options["profile"] is False:
            assert loads.max() <= (1 + tol) * tau * (1 + 1e-9)
        else:  # a height profile (order.ramped) keeps Σh = m·τ: r ≤ m/3 ramp heights ≥ τ/4 at each end
            # free at most 2 · r · 0.75·τ for the m − 2r ≥ r middle ones, so each is ≤ τ + 1.5·τ = 2.5·τ
            assert loads.max() <= 2.5 * (1 + tol) * tau * (1 + 1e-9)

    # Deterministic.
    again = create_policy("hydra", **options).plan(batch, job, cost_model)
    assert again.to_json() == plan.to_json()


@settings(max_examples=40, deadline=None)
@given(pool=st.integers(1, 48), pp=st.sampled_from([1, 2, 4, 8]), budget=st.integers(1024, 32768),
       n=st.integers(1, 300), seed=st.integers(0, 10_000))
def test_hydra_heavy_tailed_batches_on_any_pool(pool, pp, budget, n, seed) -> None:
    """Heavy-tailed (lognormal) lengths as in the traces, any pool and PP depth: valid plans, and the number of
    microbatches at least the memory minimum."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(pool * budget, np.maximum(1, rng.lognormal(8.0, 1.6, n))).astype(np.int64)
    job = JobSpec(get_model("llama3-8b"), get_gpu("h200"), pp=pp, pool=pool, max_tokens_per_rank=budget)
    cm = AnalyticCostModel(job)
    plan = create_policy("hydra").plan(GlobalBatch.of(lengths), job, cm)
    validate_plan(plan, GlobalBatch.of(lengths), max_tokens_per_rank=budget,
                  kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank)
    assert plan.num_microbatches >= math.ceil(lengths.sum() / (pool * budget))
