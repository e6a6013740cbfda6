"""The shipped length samples: contents, provenance note, size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dcpsim import traces
from dcpsim.traces import TraceError, available_samples, load_sample

DATA = Path(traces.__file__).parent / "data"

# (name, documents, max, total tokens, median) from the reference statistics in SOURCES.md.
EXPECTED = [("wlbllm", 99_519, 124_913, 394_273_078, 3227), ("prolong", 77_932, 340_149, 237_840_913, 1913.5)]


@pytest.mark.parametrize(("name", "n", "longest", "total", "median"), EXPECTED)
def test_sample_contents(name: str, n: int, longest: int, total: int, median: float) -> None:
    x = load_sample(name)
    assert x.dtype == np.int64 and x.shape == (n,)
    assert x.min() >= 1 and x.max() == longest and x.sum() == total
    assert np.median(x) == median
    with pytest.raises(ValueError):
        x[0] = 1  # shared, cached: must be read-only


def test_reference_tail_statistics() -> None:
    """Share of documents / tokens / Σ L² above 32K, as quoted in SOURCES.md."""
    for name, docs, tokens, squares in [("wlbllm", 0.009, 0.17, 0.78), ("prolong", 0.002, 0.049, 0.53)]:
        x = load_sample(name).astype(np.float64)
        above = x > 32768
        assert above.mean() == pytest.approx(docs, abs=0.0005)
        assert x[above].sum() / x.sum() == pytest.approx(tokens, abs=0.005)
        assert (x[above] ** 2).sum() / (x**2).sum() == pytest.approx(squares, abs=0.005)


def test_files_compact_and_documented() -> None:
    assert available_samples() == ["prolong", "wlbllm"]
    for name in available_samples():
        assert (DATA / f"doclens_{name}.npz").stat().st_size < 300_000
    note = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    for words in [
        "hao-ai-lab/DistCA",
        "2afd219",
        "Apache-2.0",
        "synthetic reconstruction",
        "WLB-LLM",
        "ProLong",
    ]:
        assert words in note


def test_unknown_sample() -> None:
    with pytest.raises(TraceError, match="unknown length sample 'c4'.*prolong, wlbllm"):
        load_sample("c4")
