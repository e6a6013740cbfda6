"""The fast schedulers against slow, literal rank-by-rank references.

The golden cases pin upstream on small power-of-two pools. The production schedulers take shortcuts to scale
(one load per group instead of per rank, numpy over groups of one size, stopping at the first option that
scores the pool maximum, heaps in the legacy one). The references below take none: they keep per-rank loads
and rescan the whole pool for every option, exactly as the upstream loops do, including our documented
fallback for pools upstream cannot run. Random inputs on large and non-power-of-two pools must agree.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from dcpsim.policies.mcore_dcp import schedule_sample_ids
from dcpsim.policies.mcore_scheduler import WORKLOAD_CAP_DELTA, allowed_sizes, cp_min


def _degrees(L: int, N: int, M: int, m0: int) -> list[int]:
    lower = min(cp_min(L, M, m0), N)
    return [s for s in allowed_sizes(N, m0) if s >= lower]


def _grow_rank_level(ids: list[list[int]], members: dict, gsize: dict, sizes: list[int], N: int) -> bool:
    empty = [r for r in range(N) if not ids[r]]
    s = min(gsize.values())
    s2 = next(x for x in sizes if x > s)
    need = s2 - s
    for g in list(gsize):
        if gsize[g] != s:
            continue
        st, end = members[g][0], members[g][-1]
        if end + 1 > empty[0] or end + need >= N or need > len(empty):
            continue
        moved = ids[end + 1:empty[0]]
        ids[:] = ids[:st] + [list(ids[end]) for _ in range(s2)] + moved + [[] for _ in range(N)]
        del ids[N:]
        for h in gsize:
            if h != g and members[h][0] > end:
                members[h] = [r + need for r in members[h]]
        gsize[g], members[g] = s2, list(range(st, st + s2))
        return True
    return False


def _reference_current_microbatch(seqs: list[tuple[int, int]], N: int, M: int, m0: int
                                  ) -> tuple[list[list[int]], list[tuple[int, int]]]:
    sizes = allowed_sizes(N, m0)
    times, ids = [0.0] * N, [[] for _ in range(N)]
    owner: list = [None] * N
    members: dict = {}
    gsize: dict = {}
    packed: dict = {}

    def put(g: int, ranks: list[int], sid: int, L: int, c: int) -> None:
        members.setdefault(g, ranks)
        gsize[g] = c
        packed[g] = packed.get(g, 0) + L / c
        for r in ranks:
            owner[r] = g
            times[r] += (L * L) / c
            ids[r].append(sid)

    sid, L = seqs[0]
    c = _degrees(L, N, M, m0)[0]
    put(0, list(range(c)), sid, L, c)
    cap = float(L) * float(M) * (1.0 + WORKLOAD_CAP_DELTA)
    left = []
    for sid, L in seqs[1:]:
        best = None
        for c in _degrees(L, N, M, m0):
            cost = (L * L) / c
            options = [(g, members[g]) for g in gsize if gsize[g] == c and packed[g] + L / c <= M]
            free = [r for r in range(N) if owner[r] is None]
            if len(free) >= c:
                options.append((None, sorted(free, key=lambda r: times[r])[:c]))
            for g, ranks in options:
                proj = max(t + cost if r in ranks else t for r, t in enumerate(times))
                if proj <= cap and (best is None or proj < best[0]):
                    best = (proj, c, g, ranks)
        if best is None:
            left.append((sid, L))
            continue
        _, c, g, ranks = best
        put(len(gsize) if g is None else g, ranks, sid, L, c)
    while any(not x for x in ids):
        if not _grow_rank_level(ids, members, gsize, sizes, N):
            chosen, left, acc = [], [], 0.0
            for sid, L in seqs:
                if acc + L / N <= M:
                    chosen.append(sid)
                    acc += L / N
                else:
                    left.append((sid, L))
            return [list(chosen) for _ in range(N)], left
    return ids, left


def reference_current(lengths: list[int], N: int, M: int, m0: int = 1) -> list[list[list[int]]]:
    remaining = sorted(enumerate(lengths), key=lambda t: t[1], reverse=True)
    out = []
    while remaining:
        ids, remaining = _reference_current_microbatch(remaining, N, M, m0)
        out.append(ids)
    return out


def reference_legacy(lengths: list[int], N: int, M: int) -> list[list[list[int]]]:
    sizes = allowed_sizes(N)

    def need(L: int) -> int:
        return _degrees(L, N, M, 1)[0]

    def work(L: int) -> float:
        return (L * L) / need(L)

    remaining = sorted(enumerate(lengths), key=lambda t: t[1], reverse=True)
    out = []
    while remaining:
        seqs = remaining
        k = len({need(L) for _, L in seqs})
        target = sum(work(L) for _, L in seqs) / k
        buckets, cur, cw, rk = [], [], 0.0, k
        for i, (sid, L) in enumerate(seqs):
            if cur and (cw + work(L) > target * 1.1 or len(seqs) - i <= rk - len(buckets)):
                buckets.append(deque(cur))
                cur, cw, rk = [], 0.0, rk - 1
            cur.append((sid, L))
            cw += work(L)
        buckets.append(deque(cur))
        times, ids, lens = [0.0] * N, [[] for _ in range(N)], [[] for _ in range(N)]
        owner: list = [None] * N
        members: dict = {}
        gsize: dict = {}
        first, check = None, False
        while buckets:
            pick = None
            for b in buckets:
                if b and (any(s == need(b[0][1]) for s in gsize.values())
                          or owner.count(None) >= need(b[0][1])):
                    pick = b
                    break
            if pick is None:
                break
            sid, L = pick.popleft()
            c = need(L)
            first = c if first is None else first
            cand = [(g, max(times[r] for r in members[g])) for g in gsize if gsize[g] == c]
            best_g, best_load = min(cand, key=lambda t: t[1]) if cand else (None, math.inf)
            free = [r for r in range(N) if owner[r] is None]
            if len(free) >= c and 0.0 < best_load:
                best_g = len(gsize)
                members[best_g], gsize[best_g] = free[:c], c
            for r in members[best_g]:
                owner[r] = best_g
                times[r] += work(L)
                ids[r].append(sid)
                lens[r].append(L)
            while buckets and not buckets[0]:
                buckets.pop(0)
            check = check or c < first
            if check and buckets and max(times) - min(times) <= 0.05 * max(times):
                break
        left = [s for b in buckets for s in b]
        while True:
            hi, lo = max(times), min(times)
            if hi - lo <= 0.05 * hi or lo == 0:
                break
            r0 = times.index(hi)
            g = owner[r0]
            if len(lens[r0]) <= 1:
                break
            cost = work(lens[r0][-1])
            proj = [t - cost if owner[r] == g else t for r, t in enumerate(times)]
            if not max(proj) - min(proj) < hi - lo:
                break
            left.append((ids[r0][-1], lens[r0][-1]))
            for r in members[g]:
                times[r] -= cost
                ids[r].pop()
                lens[r].pop()
        while any(not x for x in ids):
            if not _grow_rank_level(ids, members, gsize, sizes, N):
                order = sorted(gsize, key=lambda g: members[g][0])
                ids = [[s for g in order for s in ids[members[g][0]]] for _ in range(N)]
                break
        out.append(ids)
        remaining = left
    return out


def _random_case(rng: np.random.Generator, pools: list[int]) -> tuple[list[int], int, int, int]:
    N = int(rng.choice(pools))
    M = int(rng.choice([16, 100, 1000]))
    n = int(rng.integers(1, 60))
    lengths = np.clip(rng.lognormal(np.log(M) + rng.normal(0, 1), 1.3, n).astype(np.int64), 1, N * M)
    m0 = int(rng.integers(1, N + 1)) if rng.random() < 0.3 else 1
    return lengths.tolist(), N, M, m0


POWER_OF_TWO = [1, 2, 4, 8, 16, 32, 64]
OTHER = [3, 6, 10, 12, 24, 48]


@pytest.mark.parametrize("pools", [POWER_OF_TWO, OTHER], ids=["pow2", "non-pow2"])
@pytest.mark.parametrize("seed", range(4))
def test_current_equals_reference(pools: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(60):
        lengths, N, M, m0 = _random_case(rng, pools)
        assert schedule_sample_ids(lengths, N, M, m0) == reference_current(lengths, N, M, m0), \
            (lengths, N, M, m0)


@pytest.mark.parametrize("pools", [POWER_OF_TWO, OTHER], ids=["pow2", "non-pow2"])
@pytest.mark.parametrize("seed", range(4))
def test_legacy_equals_reference(pools: list[int], seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        lengths, N, M, _ = _random_case(rng, pools)
        assert schedule_sample_ids(lengths, N, M, legacy=True) == reference_legacy(lengths, N, M), \
            (lengths, N, M)


def test_current_equals_reference_on_a_wide_pool() -> None:
    """Hundreds of groups of one size: exercises the numpy path of the group search."""
    rng = np.random.default_rng(7)
    lengths = np.clip(rng.lognormal(7.0, 1.0, 600).astype(np.int64), 1, 256 * 4096).tolist()
    assert schedule_sample_ids(lengths, 256, 4096) == reference_current(lengths, 256, 4096)
    assert schedule_sample_ids(lengths, 256, 4096, legacy=True) == reference_legacy(lengths, 256, 4096)
