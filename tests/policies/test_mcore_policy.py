"""The ``mcore-dcp`` and ``mcore-dcp-legacy`` policies: a hand-checked example, plans through the validator
(property tests over random lengths, pools including non-powers of two, budgets), the fallback for pools
upstream cannot run, and the error messages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.cost_models.presets import get_gpu, get_model
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies import Engine, PolicyError, create_policy, validate_plan
from dcpsim.policies.mcore_dcp import McoreDCP, McoreDCPLegacy, schedule_sample_ids
from dcpsim.policies.mcore_scheduler import allowed_sizes
from dcpsim.policies.registry import available_policies, policy_options
from dcpsim.traces.batching import GlobalBatch
from dcpsim.traces.errors import TraceError


def batch_of(lengths: list[int], first_id: int = 1000) -> GlobalBatch:
    """Ids ``first_id + 7·i``, not the positions: a plan that confused the two would fail the tests."""
    return GlobalBatch.of(lengths, ids=first_id + 7 * np.arange(len(lengths), dtype=np.int64))


@dataclass(frozen=True)
class StubCostModel:
    """Only what the policies use: the job and the per-rank token budget."""

    job: JobSpec
    budget: int

    def max_tokens_per_rank(self) -> int:
        return self.budget


def job_of(pool: int) -> JobSpec:
    return JobSpec(get_model("tiny"), get_gpu("h100"), pool=pool)


# ---- a small example, checked by hand ----------------------------------------------------------------------

LENGTHS = [250, 100, 60, 50, 40]  # ids 0..4; pool N = 4, budget M = 100 tokens per rank


def test_current_hand_example() -> None:
    """cp_min(250) = 4: sample 0 opens group 0 on ranks 0-3 (load 250²/4 = 15625, 62.5 tokens per rank).
    Sample 1 (cp_min 1) finds no free rank and no group of 1 or 2; group 0 takes it (62.5 + 25 ≤ 100).
    Sample 2 would make 87.5 + 15 > 100: left over. Sample 3 fills group 0 to exactly 100. Sample 4: left.
    Microbatch 1: sample 2 opens a group on rank 0; for sample 4, joining it scores 3600 + 1600 but a new
    group on rank 1 scores max(3600, 1600) = 3600, the pool maximum: new group. Fill: ranks 2-3 are idle, so
    the first single-rank group grows to ranks 0-1 (pushing the other to rank 2), then that one grows to 2-3.
    """
    assert schedule_sample_ids(LENGTHS, 4, 100) == [[[0, 1, 3]] * 4, [[2], [2], [4], [4]]]


def test_legacy_hand_example() -> None:
    """Degrees 4, 1, 1, 1, 1; work 15625, 10000, 3600, 2500, 1600; k = 2 buckets with target 16662.5:
    [250] and [100, 60, 50, 40]. Sample 0 takes all four ranks; the next bucket head needs a group of 1,
    which neither exists nor has a free rank, so the microbatch ends. Microbatch 1 (k = 1): buckets
    [100, 60, 50] and [40] (the last sequence is saved for the last bucket); each opens its own rank."""
    assert schedule_sample_ids(LENGTHS, 4, 100, legacy=True) == [[[0]] * 4, [[1], [2], [3], [4]]]


def test_plan_from_hand_example() -> None:
    batch = batch_of(LENGTHS)
    plan = McoreDCP(max_seqlen_per_rank=100).plan(batch, job_of(4), StubCostModel(job_of(4), 10**6))
    assert plan.policy == "mcore-dcp" and plan.pool_size == 4 and plan.num_microbatches == 2
    mb0, mb1 = plan.microbatches
    assert [(g.ranks, g.seq_ids) for g in mb0.groups] == [((0, 1, 2, 3), (1000, 1007, 1021))]
    assert [(g.ranks, g.seq_ids) for g in mb1.groups] == [((0, 1), (1014,)), ((2, 3), (1028,))]
    assert all(g.engine == Engine.for_size("ring", g.size) for mb in plan.microbatches for g in mb.groups)
    assert plan.degrees() == {1000: 4, 1007: 4, 1021: 4, 1014: 2, 1028: 2}
    assert plan.meta["max_tokens_per_rank"] == 100 and plan.meta["peak_tokens_per_rank"] == 100
    validate_plan(plan, batch, max_tokens_per_rank=100)


def test_budget_defaults_to_the_cost_model() -> None:
    batch = batch_of(LENGTHS)
    plan = create_policy("mcore-dcp").plan(batch, job_of(4), StubCostModel(job_of(4), 100))
    assert plan.meta["max_tokens_per_rank"] == 100
    assert plan.num_microbatches == 2
    validate_plan(plan, batch, max_tokens_per_rank=100)


def test_registry() -> None:
    assert {"mcore-dcp", "mcore-dcp-legacy"} <= set(available_policies())
    want = {"max_seqlen_per_rank": None, "min_cp_size": 1, "cp_engine": "ring"}
    assert policy_options("mcore-dcp") == want == policy_options("mcore-dcp-legacy")
    assert isinstance(create_policy("mcore-dcp-legacy"), McoreDCPLegacy)
    assert create_policy("mcore-dcp", min_cp_size=2) == McoreDCP(min_cp_size=2)


# ---- pools upstream cannot run: the documented fallback -----------------------------------------------------

def test_allowed_sizes_follow_upstream_process_groups() -> None:
    assert allowed_sizes(16) == [1, 2, 4, 8, 16]
    assert allowed_sizes(12) == [1, 2, 4, 12]  # no group of 8 exists upstream on 12 ranks
    assert allowed_sizes(24, 2) == [2, 4, 8, 24]
    assert allowed_sizes(16, 3) == [4, 8, 16]
    assert allowed_sizes(1) == [1] and allowed_sizes(3) == [1, 3]


def test_degree_beyond_the_powers_of_two_uses_the_whole_pool() -> None:
    # 500 tokens at M = 100 need 8 ranks; a pool of 12 has no group of 8, so the whole pool takes it.
    assert schedule_sample_ids([500], 12, 100) == [[[0]] * 12]
    assert schedule_sample_ids([1200, 10], 12, 100) == [[[0]] * 12, [[1]] * 12]


def test_fill_that_would_overflow_upstream_falls_back_to_the_whole_pool() -> None:
    # Two groups of 4 on 10 ranks leave 2 idle; upstream would grow a group of 4 to 8 and push the other
    # past rank 9 (IndexError). Growing to the next existing size (10) does not fit either, so the whole pool
    # takes the sequences first-fit (40 + 40 tokens per rank ≤ 100).
    assert schedule_sample_ids([400, 400], 10, 100) == [[[0, 1]] * 10]
    assert schedule_sample_ids([400, 400], 10, 100, legacy=True) == [[[0, 1]] * 10]


def test_non_power_of_two_minimum_degree_rounds_up() -> None:
    # m0 = 3 would ask for groups of 3, which upstream never creates: the degree becomes 4, and the four
    # sequences take four groups of 4 in one microbatch.
    want = [[[i] for i in range(4) for _ in range(4)]]
    assert schedule_sample_ids([50, 50, 50, 50], 16, 100, min_cp_size=3) == want


# ---- property tests: every plan passes the validator ----------------------------------------------------

POOLS = [1, 2, 3, 4, 6, 8, 10, 12, 16, 24, 32]


@st.composite
def scheduling_inputs(draw: st.DrawFn, legacy: bool = False) -> tuple[list[int], int, int, int]:
    N = draw(st.sampled_from(POOLS))
    M = draw(st.sampled_from([1, 7, 100, 1000, 4096]))
    m0 = 1 if legacy else draw(st.one_of(st.just(1), st.integers(1, N)))
    lengths = draw(st.lists(st.one_of(st.integers(1, M), st.integers(1, min(4, N) * M), st.integers(1, N * M)),
                            min_size=1, max_size=40))
    return lengths, N, M, m0


def _check_plan(lengths: list[int], N: int, M: int, m0: int, legacy: bool) -> None:
    batch = batch_of(lengths)
    policy = (McoreDCPLegacy if legacy else McoreDCP)(max_seqlen_per_rank=M, min_cp_size=m0)
    plan = policy.plan(batch, job_of(N), StubCostModel(job_of(N), 1))
    validate_plan(plan, batch, max_tokens_per_rank=None if legacy else M)
    sizes = set(allowed_sizes(N, m0))
    for mb in plan.microbatches:
        assert sum(g.size for g in mb.groups) == N  # no idle rank, as upstream guarantees
        assert all(g.size in sizes for g in mb.groups)
    if not legacy:
        assert plan.meta["aligned"]  # observed on every input so far; the upstream runtime needs it
        assert plan.meta["peak_tokens_per_rank"] <= M * (1 + 1e-9)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(scheduling_inputs())
def test_current_plans_are_valid(case: tuple[list[int], int, int, int]) -> None:
    _check_plan(*case, legacy=False)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(scheduling_inputs(legacy=True))
def test_legacy_plans_are_valid(case: tuple[list[int], int, int, int]) -> None:
    _check_plan(*case, legacy=True)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(scheduling_inputs(), st.integers(0, 39), st.sampled_from(["zero", "negative", "too-long"]),
       st.booleans())
def test_impossible_lengths_raise(case: tuple[list[int], int, int, int], where: int, kind: str,
                                  legacy: bool) -> None:
    lengths, N, M, m0 = case
    i = where % len(lengths)
    lengths[i] = {"zero": 0, "negative": -5, "too-long": N * M + 1}[kind]
    with pytest.raises(PolicyError, match=rf"sample {i} has length {lengths[i]}: valid lengths are 1\.\.{N * M}"):
        schedule_sample_ids(lengths, N, M, 1 if legacy else m0, legacy=legacy)


# ---- error messages ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, pattern", [
    (([100, 0, 5], 4, 100), r"sample 1 has length 0: valid lengths are 1\.\.400 \(pool of 4 ranks × 100"),
    (([100, 401], 4, 100), r"sample 1 has length 401: valid lengths are 1\.\.400"),
    (([1.5], 4, 100), r"seqlens must be a 1-D sequence of integers"),
    (([10], 0, 100), r"total_gpus = 0 is invalid"),
    (([10], 4, 0), r"max_seqlen_per_rank = 0 is invalid"),
    (([10], 4, 100, 5), r"min_cp_size = 5 is invalid: must be in 1\.\.4"),
    (([10], 4, 100, 0), r"min_cp_size = 0 is invalid"),
])
def test_input_errors_name_the_value(args: tuple, pattern: str) -> None:
    with pytest.raises(PolicyError, match=pattern):
        schedule_sample_ids(*args)


def test_legacy_has_no_minimum_degree() -> None:
    with pytest.raises(PolicyError, match="legacy scheduler"):
        schedule_sample_ids([10], 4, 100, min_cp_size=2, legacy=True)
    with pytest.raises(PolicyError, match="mcore-dcp-legacy: min_cp_size = 2 is invalid"):
        create_policy("mcore-dcp-legacy", min_cp_size=2)


@pytest.mark.parametrize("engine", ["hybrid", "auto"])
def test_other_engines_keep_upstream_groups(engine: str) -> None:
    """cp_engine changes only the engines of upstream's groups (ablation: upstream scheduler + hierarchical
    engine)."""
    from dcpsim.cost_models import AnalyticCostModel
    from tests.conftest import small_job

    job = small_job(pool=16, max_tokens_per_rank=8192)
    cm = AnalyticCostModel(job)
    batch = batch_of([60000, 30000, 9000, 4000, 2000, 1500, 800, 700] * 3)
    ring = create_policy("mcore-dcp").plan(batch, job, cm)
    other = create_policy("mcore-dcp", cp_engine=engine).plan(batch, job, cm)
    strip = lambda p: [[(g.ranks, g.seq_ids) for g in mb.groups] for mb in p.microbatches]
    assert strip(ring) == strip(other)
    engines = {str(g.engine) for mb in other.microbatches for g in mb.groups if g.size > 1}
    assert engines and not engines <= {"ring"}
    validate_plan(other, batch, max_tokens_per_rank=8192, kv_heads_per_rank=job.kv_heads_per_rank,
                  heads_per_rank=job.heads_per_rank)


def test_unknown_engine_and_option() -> None:
    with pytest.raises(PolicyError, match="option cp_engine = 'p2p' is invalid: expected one of ring, ulysses"):
        McoreDCP(cp_engine="p2p")
    with pytest.raises(PolicyError, match="has no option 'cp_degree'"):
        create_policy("mcore-dcp", cp_degree=4)


def test_empty_input_gives_no_microbatches() -> None:
    """The scheduler maps no sequences to no microbatches; an empty *batch* cannot reach the policy (the
    batch type refuses it)."""
    assert schedule_sample_ids([], 4, 100) == []
    with pytest.raises(TraceError, match="non-empty"):
        batch_of([])
