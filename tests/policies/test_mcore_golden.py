"""Golden cases: our Megatron-Core schedulers return exactly upstream's assignment.

``tests/data/mcore_scheduler_cases.json`` holds 200 inputs with the outputs of the unmodified upstream
schedulers (sources in ``tests/data/SOURCES.md``). One test per case and scheduler, so a failure names the
case, its pool, budget and minimum degree, and the first microbatch / rank that differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcpsim.policies import validate_plan
from dcpsim.policies.mcore_dcp import groups_to_plan, schedule_sample_ids
from dcpsim.traces.batching import GlobalBatch

DATA = Path(__file__).resolve().parents[1] / "data" / "mcore_scheduler_cases.json"
CURRENT, LEGACY = "dev_default_dynamic_cp_sample_id_groups", "main_balanced_cp_sample_id_groups"
CASES: list[dict] = json.loads(DATA.read_text())["cases"]


def _case_id(i: int) -> str:
    c = CASES[i]
    return f"case{i:03d}-N{c['total_gpus']}-M{c['max_seqlen_per_dp_cp_rank']}-m{c['min_cp_size']}" \
           f"-n{len(c['seqlens'])}"


def _first_difference(got: list, want: list) -> str:
    if len(got) != len(want):
        return f"{len(got)} microbatches, upstream has {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        for r, (gr, wr) in enumerate(zip(g, w)):
            if gr != wr:
                return f"microbatch {k}, rank {r}: got {gr}, upstream {wr}"
    return "no difference"


def _check(i: int, key: str, legacy: bool) -> None:
    c = CASES[i]
    got = schedule_sample_ids(c["seqlens"], c["total_gpus"], c["max_seqlen_per_dp_cp_rank"],
                              c["min_cp_size"], legacy=legacy)
    want = c[key]
    assert got == want, _first_difference(got, want)


def test_golden_file_shape() -> None:
    assert len(CASES) == 200
    assert sum(LEGACY in c for c in CASES) == 116


@pytest.mark.parametrize("i", range(len(CASES)), ids=_case_id)
def test_current_matches_upstream(i: int) -> None:
    _check(i, CURRENT, legacy=False)


@pytest.mark.parametrize("i", [i for i, c in enumerate(CASES) if LEGACY in c],
                         ids=lambda i: _case_id(i))
def test_legacy_matches_upstream(i: int) -> None:
    _check(i, LEGACY, legacy=True)


def test_golden_current_outputs_are_valid_plans_within_budget() -> None:
    """Upstream's own outputs pass our validator at the upstream budget (the memory check holds)."""
    for c in CASES:
        batch = GlobalBatch.of(c["seqlens"])
        plan = groups_to_plan(c[CURRENT], batch.seq_ids.tolist(), c["seqlens"], c["total_gpus"], "mcore-dcp")
        validate_plan(plan, batch, max_tokens_per_rank=c["max_seqlen_per_dp_cp_rank"])


def test_golden_legacy_outputs_exceed_budget_sometimes() -> None:
    """The legacy scheduler has no memory check: some of upstream's own groups exceed M (pinned, so that a
    "fix" which silently changes the baseline is noticed)."""
    over = 0
    for c in CASES:
        if LEGACY not in c:
            continue
        batch = GlobalBatch.of(c["seqlens"])
        plan = groups_to_plan(c[LEGACY], batch.seq_ids.tolist(), c["seqlens"], c["total_gpus"],
                              "mcore-dcp-legacy")
        validate_plan(plan, batch)
        over += plan.meta["peak_tokens_per_rank"] > c["max_seqlen_per_dp_cp_rank"]
    assert over > 0
