"""Memory beyond weights and the 34·s·h/t activations (CostTerms.memory_extra; cost_models.memory): the ring's
receive buffers, FlashAttention's fp32 dQ accumulator and log-sum-exp, in the budget and in the peak."""

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.cost_models.memory import (
    activation_bytes_per_token,
    memory_budget_tokens,
    model_state_bytes,
    peak_memory_bytes,
    transient_bytes,
)

EXTRA = CostTerms.parse("legacy,+memory_extra")


def job(**kw):
    return JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=2, pool=8, context_len=65536, **kw)


def test_transient_and_saved_bytes_closed_form():
    """llama3-8b, t = 1: a = 32 heads, g = 8 KV heads, d = 128.
    ring buffers: 4 chunks (K,V and dK,dV, current and next) · 2 (K and V) · 8 · 128 · 2 B = 16,384 B per CP token;
    dQ accumulator: 32 · 128 · 4 B = 16,384 B per token; LSE: 32 · 4 = 128 B per token per layer."""
    j = job()
    assert float(transient_bytes(j, 0, 1000.0, 0.0, EXTRA)) == 1000 * 16384
    assert float(transient_bytes(j, 0, 1000.0, 1000.0, EXTRA)) == 2 * 1000 * 16384
    assert activation_bytes_per_token(j, EXTRA) - activation_bytes_per_token(j, CostTerms.legacy()) == 128 * 16
    assert float(transient_bytes(j, 0, 1000.0, 1000.0, CostTerms.legacy())) == 0.0


def test_budget_is_derived_with_the_extras():
    """Stage 0 of PP 2 holds 2 microbatches: M = ⌊free / (2 · (34·h + 4·a)·16 + 2 · 16,384)⌋ (CP assumed)."""
    j = job()
    free = 141e9 - 6e9 - model_state_bytes(j, 0)
    per_token = 2 * (34 * 4096 + 128) * 16 + 2 * 16384
    assert memory_budget_tokens(j, EXTRA) == int(free // per_token)
    assert memory_budget_tokens(j, EXTRA) < memory_budget_tokens(j, CostTerms.legacy())


def test_a_plan_that_ignores_the_budget_is_reported_above_capacity():
    """The reported peak is computed from the plan's own tokens: one rank holding 1.5 M tokens in a CP group
    of 2 at stage 0 goes over the GPU's memory; at M it fits."""
    from dcpsim.policies.plan import CPGroup, Engine, Microbatch, Plan
    from dcpsim.sim.simulate import simulate_plan
    from dcpsim.traces import GlobalBatch

    j = job()
    cm = AnalyticCostModel(j, terms=EXTRA)
    M = cm.max_tokens_per_rank()
    cap_gib = 141e9 / (1 << 30)
    for per_rank, fits in ((M, True), (int(1.5 * M), False)):
        batch = GlobalBatch(np.array([0, 1]), np.array([2 * per_rank, 2 * per_rank]), 0)
        mbs = tuple(Microbatch((CPGroup((0, 1), (i,), Engine("ring", 1, 2)),)) for i in (0, 1))
        res = simulate_plan(Plan("test", 8, mbs), batch, cm)
        expect = peak_memory_bytes(j, 0, np.array([2.0 * per_rank]), np.array([float(per_rank)]),
                                   np.array([float(per_rank)]), EXTRA)[0] / (1 << 30)
        assert res.metrics.peak_memory_gib == pytest.approx(expect, rel=1e-12)
        assert (res.metrics.peak_memory_gib <= cap_gib) == fits
