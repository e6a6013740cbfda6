"""One Ulysses rule (cost_models.ulysses): the plan validator accepts exactly the valid degrees, the bound
considers exactly those, and the planners (policies.engines) offer those of them that fit an NVLink domain; the
domain binds on a model with more KV heads than a domain has ranks, and on no shipped model and GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcpsim.cost_models import JobSpec, get_gpu, get_model
from dcpsim.cost_models.presets import GPUS, MODELS
from dcpsim.cost_models.ulysses import domain_ranks, ulysses_degrees, ulysses_degrees_of, ulysses_problem
from dcpsim.policies import CPGroup, engines, make_plan
from dcpsim.policies.errors import PlanError
from dcpsim.policies.validate import validate_plan
from dcpsim.sim.bound import ulysses_options
from dcpsim.traces.batching import GlobalBatch

MHA = replace(get_model("llama3-8b"), name="mha-8b", kv_heads=32)  # every head its own KV head


def _job(model=MHA, gpu="h100", tp=1, pool=64):
    return JobSpec(model=model, gpu=get_gpu(gpu), tp=tp, pp=1, pool=pool, context_len=262144)


def test_the_rule_divides_the_group_and_the_kv_heads_and_planners_stay_in_the_domain():
    job = _job()  # 32 KV heads, 8 ranks per domain
    assert domain_ranks(job) == 8
    assert ulysses_degrees(job, 16) == (1, 2, 4, 8)  # 16 divides both, but 16 ranks leave the domain
    assert ulysses_degrees(job, 16, within_domain=False) == (1, 2, 4, 8, 16)
    assert ulysses_degrees(job, 12) == (1, 2, 4)
    assert ulysses_degrees(job) == (1, 2, 4, 8)  # of some group size
    assert ulysses_degrees(job, within_domain=False) == (1, 2, 4, 8, 16, 32)
    assert ulysses_degrees(_job(tp=2), 8) == (1, 2, 4)  # 4 ranks of 2 GPUs per domain
    assert ulysses_degrees(_job(gpu="gb200", tp=2), 32) == (1, 2, 4, 8, 16)  # NVL72: 36 ranks; 16 KV heads
    llama = _job(get_model("llama3-8b"), tp=4)  # 2 KV heads per rank
    assert ulysses_degrees(llama, 8) == (1, 2) == ulysses_degrees(llama, 8, within_domain=False)
    assert ulysses_problem(4, 2, 8) == "Ulysses degree 4 does not divide the KV heads per rank (2)"
    assert ulysses_problem(4, 4, 6) == "Ulysses degree 4 does not divide the heads per rank (6)"
    assert ulysses_problem(16, 32, 32) is None and ulysses_problem(3, None, None) is None


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("gpu", ["h100", "gb200"])
def test_planners_bound_and_validator_share_it(tp, gpu):
    job = _job(gpu=gpu, tp=tp)
    assert ulysses_options(job) == list(ulysses_degrees(job, within_domain=False))
    kw = dict(kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank)
    for size in range(1, 65):
        offered, valid = ulysses_degrees(job, size), ulysses_degrees(job, size, within_domain=False)
        assert engines.ulysses_degrees(size, job) == list(offered)
        assert ulysses_degrees_of(size, job.kv_heads_per_rank, domain_ranks(job)) == offered
        assert set(offered) <= set(valid) <= set(ulysses_options(job))
        assert offered == tuple(u for u in valid if u <= domain_ranks(job))
        for u in (u for u in range(1, size + 1) if size % u == 0):
            plan = make_plan("t", size, [[CPGroup(tuple(range(size)), (0,), engines.engine_from_ulysses(size, u))]])
            if u in valid:
                validate_plan(plan, GlobalBatch.of([100]), **kw)
            else:
                with pytest.raises(PlanError, match=f"Ulysses degree {u} does not divide"):
                    validate_plan(plan, GlobalBatch.of([100]), **kw)


def test_the_domain_never_binds_on_a_shipped_model_and_gpu():
    """On a shipped model and GPU the planners offer every valid degree (a user's model or GPU file may not)."""
    for model in MODELS.values():
        for gpu in GPUS.values():
            for tp in (1, 2, 4, 8):
                try:
                    job = JobSpec(model=model, gpu=gpu, tp=tp, pp=1, pool=64, context_len=8192)
                except Exception:
                    continue  # not a valid job (TP beyond a domain or the heads)
                for size in (1, 2, 4, 8, 16, 64):
                    assert ulysses_degrees(job, size) == ulysses_degrees(job, size,
                                                                         within_domain=False), (model.name, tp)
