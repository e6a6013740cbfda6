"""HyDra's placement bookkeeping (policies/hydra_bins.py, hydra_placement.py): the per-class token floor that
lets a join search stop before it looks at any bin, the free blocks of every microbatch in one pass, and the
fill's order in one sort. Each must give exactly what the plain definition gives: the search over the roomiest
``PROBES`` bins without the floor, ``free_blocks`` of each microbatch in turn, the two-key lexsort."""

from __future__ import annotations

import numpy as np
import pytest

from dcpsim.policies.hydra.bins import PROBES, Packer


def _search_without_floor(pk: Packer, cls: tuple[int, int], work: float, tokens: float,
                          strict: bool) -> tuple[float, int] | None:
    """``Packer.best_in_class`` as it reads without ``least_tokens``: the roomiest bins in turn."""
    entries = pk.classes.get(cls)
    if not entries:
        return None
    div = 1.0 + pk.tol
    for _key, gid in entries[:PROBES]:
        b = pk.bins[gid]
        cap = b.cap / div if strict else b.cap
        if b.load + work > cap:
            return None
        if b.tokens + tokens <= pk.M * (1 + 1e-12):
            return b.load + work - cap, gid
    return None


def _random_packer(seed: int, slow: bool = False) -> tuple[Packer, np.random.Generator]:
    rng = np.random.default_rng(seed)
    W = 32
    overhead = {(c, 1): 0.01 * c for c in (1, 2, 4, 8)}
    pk = Packer(W, 1000.0, 1.0, 0.05, True, overhead, rng.uniform(1.0, 1.5, W) if slow else None)
    for _ in range(6):
        pk.new_mb(float(rng.uniform(0.5, 2.0)))
    return pk, rng


@pytest.mark.parametrize("seed", range(12))
def test_the_token_floor_never_changes_a_join(seed: int) -> None:
    """Random carves and joins (tokens near the budget, so that many bins lack only the tokens): after every
    step, every class's floor is at most each of its bins' tokens, and the join search with the floor finds
    what the plain search finds, for loads and tokens of every size (some of them never fitting by tokens)."""
    pk, rng = _random_packer(seed)
    stopped = 0
    for step in range(300):
        c = int(rng.choice([1, 2, 4, 8]))
        cls = (c, 1)
        w, t = float(rng.uniform(0.0, 0.4)), float(rng.uniform(100.0, 900.0))
        for strict in (True, False):
            got = pk.best_in_class(cls, w, t, strict)
            assert got == _search_without_floor(pk, cls, w, t, strict), (step, cls, w, t, strict)
            if got is None and cls in pk.least_tokens and t + pk.least_tokens[cls] > pk.M * (1 + 1e-12):
                stopped += 1
        hit = pk.best_in_class(cls, w, t, strict=False)
        if hit is not None:
            pk.add(hit[1], step, w, t)
        else:
            k = next((k for k in range(len(pk.caps)) if pk.fits_block(k, c)), None)
            pk.carve(pk.new_mb() if k is None else k, c, 1, step, w, t)
        for key, entries in pk.classes.items():
            assert pk.least_tokens[key] <= min(pk.bins[g].tokens for _, g in entries)
    assert stopped > 0  # (the floor did stop some searches)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("slow", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
def test_all_free_blocks_is_each_microbatchs_free_blocks(seed: int, slow: bool, aligned: bool) -> None:
    """Microbatches carved to random depths (some full, some untouched): ``all_free_blocks(size)`` is
    ``free_blocks(k, size)`` of every microbatch k, concatenated, for every size."""
    pk, rng = _random_packer(seed, slow)
    pk.aligned = aligned
    for k in range(len(pk.caps)):
        for _ in range(int(rng.integers(0, 6))):
            c = int(rng.choice([1, 2, 4, 8]))
            if pk.fits_block(k, c):
                pk.carve(k, c, 1, 0, 0.1, 10.0)
    for size in (1, 2, 4, 8, 3, 32, 64):
        mb, first, cap = pk.all_free_blocks(size)
        parts = [pk.free_blocks(k, size) for k in range(len(pk.caps))]
        assert mb.tolist() == [k for k, (f, _) in enumerate(parts) for _ in f]
        assert first.tolist() == [x for f, _ in parts for x in f.tolist()]
        assert cap.tolist() == [x for _, c in parts for x in c.tolist()]
        assert mb.dtype == first.dtype == np.int64 and cap.dtype == np.float64

