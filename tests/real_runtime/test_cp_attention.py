"""CP engines on 4 gloo processes against single-process attention: outputs and dq, dk, dv.

One spawn runs every case (see ``_cp_workers.py``); the tests below only read its results.
"""

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from tests.real_runtime._cp_workers import CASES, Case, run_cases

TOL = 1e-4


@pytest.fixture(scope="module")
def results():
    return run_cases(world=4, timeout_s=180.0)


@pytest.mark.parametrize("case", [c for c in CASES if not c.expect_error], ids=lambda c: c.name)
def test_engine_matches_reference(results, case: Case):
    got = results.get(case.name, {})
    members = sorted(r for g in case.groups for r in g.ranks)
    assert sorted(got) == members, f"{case.name}: results only from ranks {sorted(got)}"
    for rank, res in got.items():
        assert "error" not in res, f"{case.name} rank {rank} failed:\n{res['error']}"
        for key in ("out", "dq", "dk", "dv"):
            assert res[key] <= TOL, f"{case.name} rank {rank}: max |{key} - reference| = {res[key]:.3g}"


@pytest.mark.parametrize("case", [c for c in CASES if c.expect_error], ids=lambda c: c.name)
def test_bad_ulysses_degree_raises_value_error(results, case: Case):
    got = results.get(case.name, {})
    assert len(got) == 4
    for rank, res in got.items():
        assert "raised" in res, f"rank {rank} did not raise: {res}"
        assert "Ulysses degree 4 must divide" in res["raised"]


def test_subgroups_ran_their_own_documents(results):
    """Two CP groups of 2 run at once on disjoint ranks, each on its own documents."""
    from dcpsim.real_runtime.attention import DualChunkLayout

    case = next(c for c in CASES if c.name == "two_rings_of_2")
    res = results[case.name]
    for group in case.groups:
        expected = DualChunkLayout.build(group.lengths, len(group.ranks)).local_tokens
        assert [res[r]["local_tokens"] for r in group.ranks] == [expected] * len(group.ranks)
    assert res[0]["local_tokens"] != res[2]["local_tokens"]
