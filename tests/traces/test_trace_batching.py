"""Splitting long documents and forming global batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpsim.traces import (
    GlobalBatch,
    Trace,
    TraceError,
    TracePreset,
    form_batches,
    get_preset,
    sample_batches,
    split_long,
)
from dcpsim.traces.splitting import split_pieces

lengths_st = st.lists(st.integers(1, 5000), min_size=1, max_size=200)


def _reference_split(lengths: list[int], context: int) -> list[int]:
    out: list[int] = []
    for n in lengths:
        while n > context:
            out.append(context)
            n -= context
        out.append(n)
    return out


def _reference_batches(pieces: list[int], budget: int) -> list[list[int]]:
    """The budget rule, one piece at a time: indices of each batch."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i, n in enumerate(pieces):
        if current and tokens + n > budget:
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += n
    if current:
        batches.append(current)
    return batches


# --- split_long --------------------------------------------------------------------------------------------


def test_split_long_example() -> None:
    assert split_long([10, 3, 25, 20], 10).tolist() == [10, 3, 10, 10, 5, 10, 10]
    _, doc = split_pieces([10, 3, 25], 10)
    assert doc.tolist() == [0, 1, 2, 2, 2]


@settings(max_examples=100, deadline=None)
@given(lengths=lengths_st, context=st.integers(1, 3000))
def test_split_long_conserves_tokens_and_respects_context(lengths: list[int], context: int) -> None:
    pieces, doc = split_pieces(lengths, context)
    assert pieces.dtype == np.int64
    assert pieces.sum() == sum(lengths)
    assert pieces.min() >= 1 and pieces.max() <= context
    assert pieces.tolist() == _reference_split(lengths, context)
    np.testing.assert_array_equal(np.bincount(doc, weights=pieces, minlength=len(lengths)), lengths)


def test_split_long_large_input() -> None:
    x = np.random.default_rng(0).integers(1, 300_000, 1_000_000)
    pieces = split_long(x, 32768)
    assert pieces.sum() == x.sum() and pieces.max() == 32768
    assert pieces.size == int(np.ceil(x / 32768).sum())


def test_split_long_errors() -> None:
    with pytest.raises(TraceError, match="parameter 'context_len' = 0"):
        split_long([5], 0)
    with pytest.raises(TraceError, match=r"row 2, field 'length': negative \(value -5\)"):
        split_long([5, -5], 4)


# --- form_batches ------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, budget=st.integers(1, 20_000), context=st.integers(1, 6000))
def test_form_batches_budget_rule(lengths: list[int], budget: int, context: int) -> None:
    batches = form_batches(lengths, budget, context)
    pieces = _reference_split(lengths, context)
    expected = _reference_batches(pieces, budget)
    assert [b.seq_ids.tolist() for b in batches] == expected
    # Every piece exactly once, in order, with its length.
    ids = np.concatenate([b.seq_ids for b in batches])
    np.testing.assert_array_equal(ids, np.arange(len(pieces)))
    np.testing.assert_array_equal(np.concatenate([b.lengths for b in batches]), pieces)
    assert [b.step for b in batches] == list(range(len(batches)))
    for k, b in enumerate(batches):
        assert b.num_tokens <= budget or b.num_seqs == 1
        assert b.lengths.max() <= context
        if k + 1 < len(batches):  # closed: the next piece would not have fit
            assert b.num_tokens + int(batches[k + 1].lengths[0]) > budget


def test_form_batches_known_case() -> None:
    batches = form_batches([4, 4, 4, 9, 1, 30], 10, 12)
    assert [b.lengths.tolist() for b in batches] == [[4, 4], [4], [9, 1], [12], [12], [6]]
    assert [b.seq_ids.tolist() for b in batches] == [[0, 1], [2], [3, 4], [5], [6], [7]]
    assert batches[0].num_tokens == 8 and batches[0].num_seqs == 2


def test_form_batches_steps_limit() -> None:
    lengths = np.random.default_rng(2).integers(1, 9, 200)
    everything = form_batches(lengths, 16, 8)
    for steps in (1, 3, len(everything) - 1, len(everything)):
        assert form_batches(lengths, 16, 8, steps=steps) == everything[:steps]
    with pytest.raises(TraceError, match="fills only 5 global batches; steps = 6"):
        form_batches([4] * 10, 8, 8, steps=6)


def test_form_batches_million_documents() -> None:
    x = np.random.default_rng(1).integers(1, 20_000, 1_000_000)
    batches = form_batches(x, 4 * 2**20, 32768)
    assert sum(b.num_tokens for b in batches) == x.sum()
    assert max(b.num_tokens for b in batches) <= 4 * 2**20
    assert batches[-1].seq_ids[-1] == x.size - 1


def test_form_batches_follows_step_column() -> None:
    trace = Trace([5, 30, 7, 2, 9], step=[2, 0, 2, 0, 5])
    batches = form_batches(trace, None, 16)
    assert [b.step for b in batches] == [0, 2, 5]
    # Document 1 (30 tokens) is cut into pieces 1, 2 (16 + 14); piece ids follow trace order.
    assert [b.seq_ids.tolist() for b in batches] == [[1, 2, 4], [0, 3], [5]]
    assert [b.lengths.tolist() for b in batches] == [[16, 14, 2], [5, 7], [9]]
    assert len(form_batches(trace, 46, 16)) == 3
    assert [b.step for b in form_batches(trace, None, 16, steps=2)] == [0, 2]
    with pytest.raises(TraceError, match="step 0 holds 32 tokens, over global_batch_tokens = 20"):
        form_batches(trace, 20, 16)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"global_batch_tokens": 0, "context_len": 8}, "global_batch_tokens"),
        ({"global_batch_tokens": None, "context_len": 8}, "global_batch_tokens"),
        ({"global_batch_tokens": 8.5, "context_len": 8}, "global_batch_tokens"),
        ({"global_batch_tokens": 8, "context_len": 0}, "context_len"),
        ({"global_batch_tokens": 8, "context_len": True}, "context_len"),
        ({"global_batch_tokens": 8, "context_len": 8, "steps": 0}, "steps"),
    ],
)
def test_form_batches_bad_parameters(kwargs: dict, param: str) -> None:
    with pytest.raises(TraceError, match=f"parameter '{param}'"):
        form_batches([3, 4], **kwargs)


def test_form_batches_bad_lengths_name_the_row() -> None:
    with pytest.raises(TraceError, match=r"row 3, field 'length': zero"):
        form_batches([3, 4, 0], 8, 8)


# --- GlobalBatch -------------------------------------------------------------------------------------------


def test_global_batch_validates_and_freezes() -> None:
    b = GlobalBatch(seq_ids=[7, 3], lengths=[10, 20], step=4)
    assert b.num_tokens == 30 and b.num_seqs == 2 and b.seq_ids.dtype == np.int64
    with pytest.raises(ValueError):
        b.lengths[0] = 1
    assert b == GlobalBatch(np.array([7, 3]), np.array([10, 20]), 4)
    with pytest.raises(TraceError, match="sequence id 3 appears twice"):
        GlobalBatch([3, 5, 3], [1, 1, 1], 0)
    with pytest.raises(TraceError, match="sequence 5 has length 0"):
        GlobalBatch([3, 5], [1, 0], 0)
    with pytest.raises(TraceError, match="same length"):
        GlobalBatch([3, 5], [1], 0)
    with pytest.raises(TraceError, match="non-empty"):
        GlobalBatch([], [], 0)
    with pytest.raises(TraceError, match="parameter 'step'"):
        GlobalBatch([1], [1], -1)


def test_global_batch_of_lengths_and_optional_ids() -> None:
    b = GlobalBatch.of([10, 20, 5])
    assert b == GlobalBatch([0, 1, 2], [10, 20, 5], 0)
    offset = GlobalBatch.of([10, 20], ids=range(40, 42), step=3)
    assert offset.seq_ids.tolist() == [40, 41] and offset.step == 3 and offset.num_tokens == 30
    with pytest.raises(TraceError, match="sequence id 9 appears twice"):
        GlobalBatch.of([1, 2], ids=[9, 9])
    with pytest.raises(TraceError, match="non-empty"):
        GlobalBatch.of([])


def test_formed_batches_are_read_only() -> None:
    b = form_batches([3, 4, 5], 100, 8)[0]
    with pytest.raises(ValueError):
        b.seq_ids[0] = 9


# --- sample_batches ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "budget"), [("32k", 8 * 32768), ("256k", 4 * 262144)])
def test_sample_batches_fill_the_budget(name: str, budget: int) -> None:
    batches = sample_batches(name, 20, budget, seed=3)
    assert len(batches) == 20 and [b.step for b in batches] == list(range(20))
    ids = np.concatenate([b.seq_ids for b in batches])
    np.testing.assert_array_equal(ids, np.arange(ids.size))
    context = get_preset(name).context_len
    for k, b in enumerate(batches):
        assert b.lengths.max() <= context
        assert b.num_tokens <= budget
        if k + 1 < len(batches):
            assert b.num_tokens + int(batches[k + 1].lengths[0]) > budget
    # Closed by the budget rule, batches are nearly full on average.
    assert np.mean([b.num_tokens for b in batches]) > 0.8 * budget


def test_sample_batches_deterministic_and_seeded() -> None:
    a = sample_batches("256k", 5, 2**21, seed=1)
    assert a == sample_batches(get_preset("256k"), 5, 2**21, seed=1)
    assert a != sample_batches("256k", 5, 2**21, seed=2)


def test_sample_batches_context_override_and_many_iterations() -> None:
    batches = sample_batches("256k", 300, 2**20, context_len=16384, seed=0)
    assert len(batches) == 300
    assert max(int(b.lengths.max()) for b in batches) == 16384


def test_sample_batches_errors() -> None:
    with pytest.raises(TraceError, match="unknown trace preset"):
        sample_batches("nope", 1, 100)
    with pytest.raises(TraceError, match="parameter 'iterations'"):
        sample_batches("32k", 0, 100)
    with pytest.raises(TraceError, match="parameter 'global_batch_tokens'"):
        sample_batches("32k", 1, 0)
    with pytest.raises(TraceError, match="parameter 'context_len'"):
        sample_batches("32k", 1, 100, context_len=0)


def test_sample_batches_last_batch_is_closed_across_draws() -> None:
    """The budget straddles the first draw of documents: the batch must still be filled to the budget."""
    ones = TracePreset("ones", 8, "one-token documents", "test", lambda n, seed: np.ones(n, dtype=np.int64))
    for budget in (4095, 4096, 4100, 10_000):
        batches = sample_batches(ones, 2, budget)
        assert [b.num_tokens for b in batches] == [budget, budget]
