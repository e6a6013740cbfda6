"""dcpsim compare reports the bound and each policy's efficiency; the CLI validates plans against the cost
model's memory budget, whatever budget a plan's metadata claims."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, get_model
from dcpsim.experiments.cli import main
from dcpsim.experiments.runner import run_policy
from dcpsim.policies import PlanError
from dcpsim.policies.plan import CPGroup, Engine, make_plan
from dcpsim.policies.registry import _REGISTRY, register_policy
from dcpsim.policies.spec import parse_policy_specs
from dcpsim.sim.bound import iteration_bound
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job

SMALL = ["--global-batch-tokens", "1048576", "--no-progress"]


def test_compare_json_has_bound_and_efficiency_for_every_policy(capsys) -> None:
    pols = "static-cp,mcore-dcp,hydra,dp-balanced,wlb-llm,distca,mcore-dcp-legacy"
    assert main(["compare", "--json", *SMALL, "--policies", pols]) == 0
    out = json.loads(capsys.readouterr().out)
    res = out["results"]
    assert [r["policy"] for r in res] == pols.split(",")
    budgeted = {r["bound_s"] for r in res if r["policy"] != "mcore-dcp-legacy"}
    assert len(budgeted) == 1  # one batch, one budget: the same bound for every policy that honours it
    for r in res:
        assert r["bound_s"] > 0
        assert r["efficiency"] == pytest.approx(r["bound_s"] / r["iteration_time_s"], rel=1e-12)
        assert 0 < r["efficiency"] <= 1
    assert main(["compare", *SMALL, "--policies", "static-cp,hydra"]) == 0
    table = capsys.readouterr().out
    assert "bound s" in table and "eff" in table


@dataclass(frozen=True)
class _Inflating:
    """A test policy that puts everything on one rank and claims a budget large enough for it."""

    name: ClassVar[str]

    def plan(self, batch, job, cost_model):
        ids = tuple(int(s) for s in batch.seq_ids)
        return make_plan(self.name, job.pool, [[CPGroup((0,), ids, Engine())]], max_tokens_per_rank=10**9)


def test_plan_metadata_cannot_inflate_the_budget() -> None:
    if "test-inflating" not in _REGISTRY:
        register_policy("test-inflating")(_Inflating)
    job = small_job(pool=2, max_tokens_per_rank=1000)
    cm = ConstantCostModel(job)
    batch = GlobalBatch.of([800, 800])
    with pytest.raises(PlanError, match="rank 0 holds 1600 tokens, over the memory budget of 1000"):
        run_policy(parse_policy_specs("test-inflating")[0], [batch], cm)


def test_bound_of_a_plan_that_ignores_memory_is_the_memory_free_bound() -> None:
    # M = 1000, W = 2, 7200 tokens. Under the budget every plan needs ≥ Σ L / M = 7.2 rank-slots, each paying
    # a group's fixed per-layer cost, and the 1800-token sequence needs degree 2; without the budget neither
    # holds, so the memory-free bound is lower. A plan with 1800 tokens on one rank gets the memory-free bound
    # (whatever its metadata says), one that honours the budget gets the budget's.
    job = small_job(model=get_model("tiny"), pool=2, max_tokens_per_rank=1000)  # tiny: a negligible sync
    cm = AnalyticCostModel(job)
    L = np.array([1800] + [900] * 6)
    batch = GlobalBatch.of(L)
    free = iteration_bound(L, cm, max_tokens_per_rank=None).bound_s
    budget = iteration_bound(L, cm).bound_s
    assert free < budget
    over = make_plan("x", 2, [[CPGroup((0,), (0,), Engine()), CPGroup((1,), tuple(range(1, 7)), Engine())]],
                     max_tokens_per_rank=1000)
    fits = make_plan("x", 2, [[CPGroup((0, 1), (0,), Engine.for_size("ring", 2))]]
                     + [[CPGroup((0,), (k,), Engine()), CPGroup((1,), (k + 1,), Engine())] for k in (1, 3, 5)])
    for plan, want in ((over, free), (fits, budget)):
        m = simulate_plan(plan, batch, cm).metrics
        assert m.bound_s == want and m.bound_s <= m.iteration_time_s
