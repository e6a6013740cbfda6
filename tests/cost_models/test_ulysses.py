"""One Ulysses rule (cost_models.ulysses): the planners' degrees (policies.engines), the bound's options
(sim.bound) and the plan validator read the same function; the NVLink-domain condition binds on a model with
more KV heads than a domain has ranks, and on no shipped model and GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcpsim.cost_models import JobSpec, get_gpu, get_model
from dcpsim.cost_models.presets import GPUS, MODELS
from dcpsim.cost_models.ulysses import domain_ranks, ulysses_degrees, ulysses_degrees_of, ulysses_problem
from dcpsim.policies import engines
from dcpsim.policies.errors import PlanError
from dcpsim.policies import CPGroup, make_plan
from dcpsim.policies.validate import validate_plan
from dcpsim.sim.bound import ulysses_options
from dcpsim.traces.batching import GlobalBatch

MHA = replace(get_model("llama3-8b"), name="mha-8b", kv_heads=32)  # every head its own KV head


def _job(model=MHA, gpu="h100", tp=1, pool=64):
    return JobSpec(model=model, gpu=get_gpu(gpu), tp=tp, pp=1, pool=pool, context_len=262144)


def test_the_rule_divides_the_group_and_the_kv_heads_and_fits_the_domain():
    job = _job()  # 32 KV heads, 8 ranks per domain
    assert domain_ranks(job) == 8
    assert ulysses_degrees(job, 16) == (1, 2, 4, 8)  # 16 divides both, but 16 ranks leave the domain
    assert ulysses_degrees(job, 12) == (1, 2, 4)
    assert ulysses_degrees(job) == (1, 2, 4, 8)  # of some group size
    assert ulysses_degrees(_job(tp=2), 8) == (1, 2, 4)  # 4 ranks of 2 GPUs per domain
    assert ulysses_degrees(_job(gpu="gb200", tp=2), 32) == (1, 2, 4, 8, 16)  # NVL72: 36 ranks; 16 KV heads
    llama = _job(get_model("llama3-8b"), tp=4)  # 2 KV heads per rank
    assert ulysses_degrees(llama, 8) == (1, 2)
    assert ulysses_problem(4, 2, 8, None) == "Ulysses degree 4 does not divide the KV heads per rank (2)"
    assert ulysses_problem(16, 32, 32, 8).startswith("Ulysses degree 16 does not fit in an NVLink domain (8 ranks)")
    assert ulysses_problem(1, 1, 1, 1) is None


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("gpu", ["h100", "gb200"])
def test_planners_bound_and_validator_share_it(tp, gpu):
    job = _job(gpu=gpu, tp=tp)
    assert ulysses_options(job) == list(ulysses_degrees(job))
    for size in range(1, 65):
        us = ulysses_degrees(job, size)
        assert engines.ulysses_degrees(size, job) == list(us)
        assert engines.ulysses_degrees_of(size, job.kv_heads_per_rank, domain_ranks(job)) == us
        assert set(us) <= set(ulysses_options(job))
        assert all(size % u == 0 for u in us)
        for u in range(1, size + 1):
            if size % u:
                continue
            group = CPGroup(tuple(range(size)), (0,), engines.engine_from_ulysses(size, u))
            plan = make_plan("t", size, [[group]])
            kw = dict(kv_heads_per_rank=job.kv_heads_per_rank, heads_per_rank=job.heads_per_rank,
                      ulysses_domain_ranks=domain_ranks(job))
            if u in us:
                validate_plan(plan, GlobalBatch.of([100]), **kw)
            else:
                with pytest.raises(PlanError, match=f"Ulysses degree {u} does not"):
                    validate_plan(plan, GlobalBatch.of([100]), **kw)


def test_the_domain_never_binds_on_a_shipped_model_and_gpu():
    """So the rule gives every shipped scenario the degrees of the rule without the domain (u divides the
    group size and the KV heads per rank): the planners', the bound's and the validator's numbers are those of
    before the one rule."""
    for model in MODELS.values():
        for gpu in GPUS.values():
            for tp in (1, 2, 4, 8):
                try:
                    job = JobSpec(model=model, gpu=gpu, tp=tp, pp=1, pool=64, context_len=8192)
                except Exception:
                    continue  # not a valid job (TP beyond a domain or the heads)
                kv = job.kv_heads_per_rank
                for size in (1, 2, 4, 8, 16, 64):
                    assert ulysses_degrees(job, size) == ulysses_degrees_of(size, kv, 1 << 20), (model.name, tp)
