"""The declared pricing (cost_models.base.Pricing): the default built on group_costs alone gives the analytic
model's fast pricing's numbers, on random batches, for several cost-term settings and a MoE model; a cost model
that implements only the CostModel protocol (ConstantCostModel) is priced through the default; pricing_of
returns a model's own pricing only where it declares one; the group overhead's one rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, CostTerms
from dcpsim.cost_models.analytic_pricing import AnalyticPricing
from dcpsim.cost_models.base import DeclaresPricing
from dcpsim.cost_models.pricing import GroupCostsPricing, fixed_from_probes, pricing_of

from ._cases import alone, make_job, random_options

MODELS = [
    (make_job(), "all"),
    (make_job(), "legacy"),
    (make_job(), "all,-fixed_costs"),
    (make_job(), "all,-lm_head"),
    (make_job(), "all,-links"),
    (make_job(tp=2), "all"),
    (make_job(pool=12), "all"),  # stages off NVLink-domain boundaries: every stage its own class
    (make_job(pp=1), "all"),
    (make_job("qwen3-30b-a3b", "h100"), "all"),  # MoE
    (make_job("qwen3-30b-a3b", "h100"), "legacy"),
]


def _both(job, terms):
    cm = AnalyticCostModel(job, terms=CostTerms.parse(terms))
    return cm, pricing_of(cm), GroupCostsPricing(cm)


@pytest.mark.parametrize("job,terms", MODELS)
def test_the_default_gives_the_fast_pricings_numbers(job, terms):
    cm, fast, slow = _both(job, terms)
    assert isinstance(fast, AnalyticPricing) and type(slow) is GroupCostsPricing
    rng = np.random.default_rng(11)
    n = 120
    lengths = rng.integers(1, 300_000, n)
    lengths[:3] = [1, 2, 1]
    sizes, u = random_options(rng, n, job)
    sizes = np.minimum(sizes, job.pool)
    u = np.where(sizes % u == 0, u, 1)
    stages = tuple(range(job.pp))
    for s in stages:  # each sequence alone: the numbers of group_costs, bit for bit
        want = np.asarray(cm.group_costs(alone(lengths, sizes, u), s).total_s)
        assert fast.alone_total_s(lengths, sizes, u, s).tobytes() == want.tobytes()
        assert slow.alone_total_s(lengths, sizes, u, s).tobytes() == want.tobytes()
    # by option, cut to prefixes
    opt_s, opt_u = np.unique(np.stack([sizes, u]), axis=1)
    pick = rng.integers(0, len(opt_s), n)
    prefix = tuple(int(k) for k in rng.integers(0, n + 1, len(stages)))
    got = fast.alone_stage_totals(lengths, opt_s, opt_u, stages, prefix, option=pick)
    want_rows = slow.alone_stage_totals(lengths, opt_s, opt_u, stages, prefix, option=pick)
    for g, w, k in zip(got, want_rows, prefix):
        assert g.shape == (k,) and g.tobytes() == w.tobytes()
    # every option at every length
    got = fast.alone_block_totals(lengths[:40], opt_s, opt_u, stages, prefix=tuple(min(k, 40) for k in prefix))
    want_rows = slow.alone_block_totals(lengths[:40], opt_s, opt_u, stages, prefix=tuple(min(k, 40) for k in prefix))
    for g, w in zip(got, want_rows):
        assert g.shape == w.shape and g.tobytes() == w.tobytes()
    # the overhead: the same rule on the same numbers (the default at every stage, the fast one per class)
    assert fast.group_overhead(sizes, u).tobytes() == slow.group_overhead(sizes, u).tobytes()
    assert fast.prices_fixed_costs() == cm.terms.fixed_costs and slow.prices_fixed_costs()


@pytest.mark.parametrize("job,terms", MODELS)
def test_stages_of_one_class_cost_the_same(job, terms):
    """Each stage costs what its class's first stage costs (alone totals for stage_classes; compute and TP
    fields of any packed batch for compute_stage_classes)."""
    cm, fast, _ = _both(job, terms)
    rng = np.random.default_rng(2)
    n = 60
    lengths = rng.integers(1, 200_000, n)
    sizes, u = random_options(rng, n, job)
    sizes = np.minimum(sizes, job.pool)
    u = np.where(sizes % u == 0, u, 1)
    classes, compute = fast.stage_classes(), fast.compute_stage_classes()
    assert len(classes) == len(compute) == job.pp
    for s in range(job.pp):
        assert classes[s] <= s and compute[s] <= s
        a = cm.group_costs(alone(lengths, sizes, u), s).total_s
        b = cm.group_costs(alone(lengths, sizes, u), classes[s]).total_s
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), s
        gb = alone(lengths, sizes, u)
        x, y = cm.group_costs(gb, s), cm.group_costs(gb, compute[s])
        for f in ("fwd_compute_s", "bwd_compute_s", "fwd_tp_comm_s", "bwd_tp_comm_s"):
            assert np.asarray(getattr(x, f)).tobytes() == np.asarray(getattr(y, f)).tobytes(), (s, f)
    if job.model.is_moe or job.pp < 3:
        assert compute == tuple(range(job.pp))
    else:  # a dense model's middle stages are one compute class
        assert compute == (0,) + (1,) * (job.pp - 2) + (job.pp - 1,)


def test_a_constant_cost_model_is_priced_through_group_costs():
    cm = ConstantCostModel(make_job(pp=4), fwd_s_per_token=2e-6, bwd_factor=2.0)
    assert not isinstance(cm, DeclaresPricing)
    p = pricing_of(cm)
    assert type(p) is GroupCostsPricing and p.stage_classes() == (0, 1, 2, 3) == p.compute_stage_classes()
    lengths, sizes, u = np.array([10, 300, 4000]), np.array([1, 4, 8]), np.array([1, 2, 8])
    want = np.array([10, 75, 500]) * 2e-6 * 3.0  # tokens per rank · rate · (1 + bwd factor)
    np.testing.assert_allclose(p.alone_total_s(lengths, sizes, u, 2), want, rtol=1e-15)
    rows = p.alone_stage_totals(lengths, sizes, u, (0, 2), prefix=(2, None))
    assert [len(r) for r in rows] == [2, 3]
    block = p.alone_block_totals(np.array([8, 16]), sizes, u, (1,))[0]
    np.testing.assert_allclose(block, np.array([[8, 16], [2, 4], [1, 2]]) * 2e-6 * 3.0, rtol=1e-15)
    # time proportional to tokens: no fixed part; no Ulysses floor declared
    np.testing.assert_array_equal(p.group_overhead(sizes, u), 0.0)
    assert p.ulysses_floor(np.ones(3), u) == 0.0 and p.prices_fixed_costs()


@dataclass(frozen=True)
class _Offset(ConstantCostModel):
    """Constant rate plus a fixed forward time per group, and its own (declared) pricing."""

    fixed_s: float = 0.5

    def group_costs(self, groups, stage=0):
        c = super().group_costs(groups, stage)
        return type(c)(c.fwd_compute_s + self.fixed_s, c.fwd_comm_s, c.bwd_compute_s, c.bwd_comm_s)

    def pricing(self):
        return _OwnPricing(self)


class _OwnPricing(GroupCostsPricing):
    def ulysses_floor(self, tpr, u):
        return 1.0


def test_pricing_of_returns_a_declared_pricing_and_the_overhead_rule_finds_a_fixed_part():
    cm = _Offset(make_job(pp=2))
    assert isinstance(cm, DeclaresPricing)
    p = pricing_of(cm)
    assert type(p) is _OwnPricing and p.ulysses_floor(np.ones(1), np.ones(1)) == 1.0
    np.testing.assert_allclose(p.group_overhead(np.array([1, 8, 8]), np.array([1, 1, 8])), 0.5, rtol=1e-12)


def test_fixed_from_probes_is_the_intercept_and_never_negative():
    one, two = np.array([3.0, 1.0, 2.0]), np.array([5.0, 2.0, 5.0])  # a + b·x at x = 1, 2: a = 1, 0, −1
    np.testing.assert_array_equal(fixed_from_probes(one, two), [1.0, 0.0, 0.0])


def test_the_analytic_models_pricing_is_declared_and_memoised():
    cm = AnalyticCostModel(make_job())
    p = cm.pricing()
    assert pricing_of(cm) is p and p.stage_classes() == (0, 1, 1, 3)
    assert not hasattr(cm, "alone_total_s")  # one way in: pricing_of (no second, undeclared API on the model)

