"""HyDra reads per-rank speeds from the job (cost_models.stragglers): with a slow rank it puts less work there."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dcpsim import traces
from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.stragglers import Stragglers
from dcpsim.policies import create_policy, validate_plan
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.spec import resolve_length_source

JOB = JobSpec(get_model("llama3-8b"), get_gpu("h100"), tp=1, pp=2, pool=8, context_len=32768,
              global_batch_tokens=1 << 19)
BATCH = traces.sample_batches(resolve_length_source("lognormal:mean=2048,sigma=1.0,min=128,max=16384"), 1,
                              1 << 19, context_len=32768, seed=0)[0]


def rank_work(plan, cm) -> np.ndarray:
    """[W] each pool rank's compute seconds at stage 0, priced at full speed (the work the plan gives it)."""
    tl = simulate_plan(plan, BATCH, cm).timeline
    sel = (tl["kind"] == "compute") & (tl["microbatch"] >= 0) & (tl["stage"] == 0)
    return np.bincount(tl["rank"][sel], weights=(tl["end"] - tl["start"])[sel], minlength=JOB.pool)


@pytest.mark.parametrize("spec", ["3=2", "s1r3=2", "gpu11=1.5"])  # gpu11 = stage 1, pool rank 3 (tp 1, W 8)
def test_a_slow_rank_gets_less_work_and_the_iteration_is_faster(spec):
    cm = AnalyticCostModel(JOB)
    slow_job = replace(JOB, stragglers=Stragglers.parse(spec))
    slow_cm = AnalyticCostModel(slow_job)
    hydra = create_policy("hydra")
    unaware = hydra.plan(BATCH, JOB, cm)
    aware = hydra.plan(BATCH, slow_job, slow_cm)
    validate_plan(aware, BATCH, max_tokens_per_rank=slow_cm.max_tokens_per_rank(),
                  kv_heads_per_rank=JOB.kv_heads_per_rank, heads_per_rank=JOB.heads_per_rank)
    before, after = rank_work(unaware, cm), rank_work(aware, cm)
    # without stragglers the columns are balanced; with rank 3 slow it carries clearly less than before, and
    # less than the mean of the full-speed ranks outside its aligned pair {2, 3}
    assert before.max() / before.min() < 1.02
    assert after[3] < 0.9 * before[3]
    assert after[3] < 0.9 * np.delete(after, [2, 3]).mean()
    # and the plan that knows the speeds runs the straggling iteration faster than the one that does not
    t_unaware = simulate_plan(unaware, BATCH, slow_cm).metrics.iteration_time_s
    t_aware = simulate_plan(aware, BATCH, slow_cm).metrics.iteration_time_s
    assert t_aware < 0.95 * t_unaware


def test_without_stragglers_the_plan_is_unchanged():
    # an explicit factor of 1 is "no straggler" in effect: the same plan as the plain job
    cm = AnalyticCostModel(JOB)
    one = replace(JOB, stragglers=Stragglers.parse("3=1"))
    a = create_policy("hydra").plan(BATCH, JOB, cm)
    b = create_policy("hydra").plan(BATCH, one, AnalyticCostModel(one))
    assert a.microbatches == b.microbatches


@pytest.mark.parametrize("f,n", [(2.0, 4), (2.0, 5), (4.0, 4), (4.0, 8)])
def test_a_slow_first_rank_never_makes_placement_open_microbatches_forever(f, n):
    """Regression: a fill sequence that fit nowhere opened a microbatch whose first block (rank 0, slow) held
    only 1/f of its height, so it never fit and phase B opened microbatches until memory ran out (found by
    the bound property test with random speeds). Each case looped before the fix; an alarm turns a loop
    into a failure."""
    import signal

    from dcpsim.cost_models import ConstantCostModel
    from dcpsim.traces.batching import GlobalBatch

    job = JobSpec(get_model("tiny"), get_gpu("h100"), pool=4, max_tokens_per_rank=4096, context_len=4096,
                  stragglers=Stragglers.parse(f"0={f:g}"))
    batch = GlobalBatch.of([1000] * n)

    def too_long(*_):
        raise TimeoutError("hydra's placement did not finish")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(20)
    try:
        plan = create_policy("hydra").plan(batch, job, ConstantCostModel(job))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    validate_plan(plan, batch, max_tokens_per_rank=4096, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)
    assert plan.num_microbatches <= n
