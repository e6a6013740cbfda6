"""Golden cases: ``dp-balanced`` returns exactly upstream ``DpBalancedScheduler``'s assignment, and its plans
are valid under the cost model's memory budget.

``tests/data/dp_balanced_cases.json`` holds 160 inputs (pools 1..128, non-powers of two included, with and
without VPP multiples and ``max_num_seqs``) with the outputs of the unmodified upstream function, or the fact
that upstream's assertion fired (sources in ``tests/data/SOURCES.md``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dcpsim.cost_models import ConstantCostModel
from dcpsim.policies import PolicyError, create_policy, validate_plan
from dcpsim.policies.dp_balanced import dp_balanced_groups
from dcpsim.traces.batching import GlobalBatch
from tests.conftest import small_job

DATA = Path(__file__).resolve().parents[1] / "data" / "dp_balanced_cases.json"
DOC = json.loads(DATA.read_text())
CASES: list[dict] = DOC["cases"]


def _case_id(i: int) -> str:
    c = CASES[i]
    return (f"case{i:03d}-cp{c['cp_size']}-dp{c['dp_size']}-M{c['max_seqlen_per_dp_cp_rank']}"
            f"-vpp{c['microbatch_group_size_per_vp_stage']}-mns{c['max_num_seqs']}-n{len(c['seqlens'])}")


def test_golden_file_covers_the_acceptance() -> None:
    assert DOC["upstream"]["commit"] == "d48bd6be0a85cc0d6d3cc71e8750cf357cc6bdb1"
    ok = [c for c in CASES if c["error"] is None]
    pools = {c["cp_size"] * c["dp_size"] for c in ok}
    assert len(ok) >= 100
    assert {1, 3, 5, 7, 127, 128} <= pools and min(pools) == 1 and max(pools) == 128
    assert any(c["microbatch_group_size_per_vp_stage"] for c in ok) and any(c["max_num_seqs"] for c in ok)


@pytest.mark.parametrize("i", range(len(CASES)), ids=_case_id)
def test_matches_upstream(i: int) -> None:
    c = CASES[i]
    args = (c["seqlens"], c["cp_size"], c["dp_size"], c["max_seqlen_per_dp_cp_rank"],
            c["microbatch_group_size_per_vp_stage"], c["max_num_seqs"])
    if c["error"] is not None:
        with pytest.raises(PolicyError, match="not enough samples to move"):
            dp_balanced_groups(*args)
        return
    assert dp_balanced_groups(*args) == c["sample_id_groups"]


def test_hand_example() -> None:
    # cp 2, dp 2, M 5 → packs of ≤ 10 tokens in order: [6,4] [7,3] [3,3] → 3 packs, not a multiple of 2:
    # the last pack gives its last sample → [6,4] [7,3] [3] [3]. Microbatch 0: packs 0, 1; microbatch 1: 2, 3.
    got = dp_balanced_groups([6, 4, 7, 3, 3, 3], 2, 2, 5)
    assert got == [[[0, 1], [0, 1], [2, 3], [2, 3]], [[4], [4], [5], [5]]]


@pytest.mark.parametrize("i", [i for i, c in enumerate(CASES) if c["error"] is None][:40])
def test_policy_plan_is_valid_and_follows_upstream(i: int) -> None:
    c = CASES[i]
    cp, dp, M = c["cp_size"], c["dp_size"], c["max_seqlen_per_dp_cp_rank"]
    job = small_job(pool=cp * dp, max_tokens_per_rank=M, context_len=cp * M)
    cm = ConstantCostModel(job)
    batch = GlobalBatch.of(c["seqlens"], ids=np.asarray(c["sample_ids"], dtype=np.int64))
    plan = create_policy("dp-balanced", cp_size=cp, microbatch_group_size_per_vp_stage=c[
        "microbatch_group_size_per_vp_stage"], max_num_seqs=c["max_num_seqs"]).plan(batch, job, cm)
    validate_plan(plan, batch, max_tokens_per_rank=cm.max_tokens_per_rank())
    assert plan.num_microbatches == len(c["sample_id_groups"])
    for mb, want in zip(plan.microbatches, c["sample_id_groups"]):
        for g in mb.groups:
            assert g.size == cp and g.ranks[0] % cp == 0
            assert list(g.seq_ids) == [c["sample_ids"][s] for s in want[g.ranks[0]]]


def test_bad_input_is_one_clear_error() -> None:
    job = small_job(pool=4, max_tokens_per_rank=100, context_len=200)
    cm = ConstantCostModel(job)
    with pytest.raises(PolicyError, match="sequence id 1 has 500 tokens, over cp_size × budget = 2 × 100"):
        create_policy("dp-balanced").plan(GlobalBatch.of([10, 500]), job, cm)
    with pytest.raises(PolicyError, match="cp_size = 3 must divide the pool size 4"):
        create_policy("dp-balanced", cp_size=3).plan(GlobalBatch.of([10]), job, cm)
    with pytest.raises(PolicyError, match="option max_num_seqs = 0 is invalid"):
        create_policy("dp-balanced", max_num_seqs=0)
