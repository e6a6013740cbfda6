"""DistCA-style FLOPs target (``distca``): every rank pulled to F̄ = Σ FLOPs / (ranks × microbatches) within a
tolerance, with CP degrees of any size (docs/policies/distca.md).

Follows the balancing rule of Zhuang et al., "Efficient Long-context Language Model Training by Core
Attention Disaggregation" (DistCA, arXiv 2510.18121, 2025): the scheduler computes the ideal per-server load
F̄ = Σ FLOPs / n and splits documents into shards until every server's load is within a tolerance ε of F̄;
shards of a document may be of any count (no power-of-two or divisor constraint). DistCA disaggregates *core
attention* onto separate attention servers; dcpsim's plans run a sequence's whole layer stack on its CP
group, so here the rule sizes CP groups instead:

1. FLOPs per sequence F(L) = attention + linear forward FLOPs (policies.wlb_llm.document_work).
2. m microbatches (``num_microbatches``; default: the 1F1B trade-off under the cost model, below), at least
   what memory needs (⌈Σ L / (W · M)⌉). Target F̄ = Σ F / (W · m); cap = F̄ · (1 + ``tolerance``).
3. Degree c(L) = max(memory minimum ⌈L / M⌉, ⌈F(L) / cap⌉), at most W: any integer.
4. Sequences by decreasing per-rank share F / c: (a) join the least-loaded existing group of degree c that
   stays ≤ cap and within memory; else (b) open a group in the least-loaded microbatch that has c contiguous
   free ranks, on the free window whose ranks carry the least load over the iteration so far (so that no rank
   collects more than its share: that would be a DP bubble); else (c) the least-loaded group of degree c
   with memory room, over cap; else (d) a new microbatch.
5. Engines: ``cp_engine`` (default ``auto``: the cheapest Ulysses × ring split per group, policies.engines).

The default m minimises (m + p − 1) · (A / m + o), the 1F1B iteration of m equal microbatches, where A is
the batch's per-rank work at stage 0 (Σ of every sequence's rank-seconds alone on one rank, / W) and o a
microbatch's fixed per-rank time (a one-token group's forward + backward: the per-layer fixed costs and the
GEMMs' half-saturation term, which every extra microbatch pays again): m* = √((p − 1) · A / o).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel, GroupBatch
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, assign_engines
from dcpsim.policies.opening import plan_inputs
from dcpsim.policies.plan import CPGroup, Engine, Plan, make_plan
from dcpsim.policies.registry import option, register_policy
from dcpsim.policies.wlb_llm import document_work

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch


def one_f_one_b_microbatches(lengths: np.ndarray, cost_model: CostModel, num_stages: int, m_min: int) -> int:
    """m* = √((p − 1) · A / o), clamped to [m_min, n] (see the module docstring)."""
    n = len(lengths)
    if num_stages <= 1 or n == 0:
        return max(1, m_min)
    W = cost_model.job.pool
    one = np.ones(n, dtype=np.int64)
    gb = GroupBatch(np.asarray(lengths, dtype=np.int64), np.arange(n, dtype=np.int64), one, one,
                    np.zeros(n, dtype=np.int64))
    c = cost_model.group_costs(gb, 0)
    A = float(np.sum(np.asarray(c.total_s))) / W
    probe = cost_model.group_costs(GroupBatch(np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                              np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64),
                                              np.zeros(1, dtype=np.int64)), 0)
    o = float(np.asarray(probe.total_s).reshape(-1)[0])
    if o <= 0:
        return max(n, m_min)
    m = round(math.sqrt((num_stages - 1) * A / o))
    return int(min(max(m, m_min, 1), max(n, m_min)))


def microbatch_count(requested: int | None, lengths: np.ndarray, cost_model: CostModel, num_stages: int) -> int:
    """The microbatches to plan: ``requested`` (or the 1F1B pick m*), never fewer than memory needs,
    ⌈Σ L / (W · M)⌉ (W the pool, M the per-rank token budget)."""
    W, M = cost_model.job.pool, cost_model.max_tokens_per_rank()
    m_mem = max(1, math.ceil(float(np.sum(lengths)) / (W * M)))
    return max(requested or one_f_one_b_microbatches(lengths, cost_model, num_stages, m_mem), m_mem)


def _first_window(free: np.ndarray, c: int, rank_load: np.ndarray) -> np.ndarray:
    """Per microbatch (rows of ``free``), the first rank of the c contiguous free ranks whose loads over the
    iteration so far (``rank_load``) sum least (ties: the lowest), or −1 where there are none."""
    m, W = free.shape
    if c > W:
        return np.full(m, -1)
    s = np.concatenate([np.zeros((m, 1), dtype=np.int64), np.cumsum(free, axis=1)], axis=1)
    ok = (s[:, c:] - s[:, :-c]) == c
    cl = np.concatenate([[0.0], np.cumsum(rank_load)])
    win = cl[c:] - cl[:-c]
    has = ok.any(axis=1)
    return np.where(has, np.argmin(np.where(ok, win[None, :], np.inf), axis=1), -1)


@register_policy("distca")
@dataclass(frozen=True)
class DistCA:
    """DistCA-style per-rank FLOPs target with tolerance and any-size CP degrees."""

    tolerance: float = option(0.1, ge=0.0, le=10.0)
    num_microbatches: int | None = option(None, ge=1)
    cp_engine: str = option("auto", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model)
        W, M, ids, L = job.pool, inp.budget, inp.ids, inp.lengths
        inp.check_fit(W * M, f"more than the pool of {W} ranks holds at {M} tokens per rank")
        m = microbatch_count(self.num_microbatches, L, cost_model, job.pp)
        F = document_work(L, job)
        target = float(F.sum()) / (W * m) if len(L) else 0.0
        cap = target * (1 + self.tolerance)
        cmin = -(-L // M)
        c_of = np.minimum(W, np.maximum(cmin, np.ceil(F / cap).astype(np.int64) if cap > 0 else 1))
        share = F / c_of
        free = np.ones((m, W), dtype=bool)
        mb_load = np.zeros(m)
        rank_load = np.zeros(W)
        groups: list[dict] = []
        by_size: dict[int, list[int]] = {}
        for i in np.lexsort((np.arange(len(L)), -share)).tolist():
            c, sh, tok = int(c_of[i]), float(share[i]), int(L[i])
            gids = by_size.get(c, [])
            g = -1
            if gids:
                load = np.array([groups[k]["load"] for k in gids])
                room = np.array([groups[k]["tokens"] + tok <= c * M for k in gids])
                under = room & (load + sh <= cap * (1 + 1e-12))
                if under.any():
                    g = gids[int(np.argmin(np.where(under, load, np.inf)))]
            if g < 0:
                first = _first_window(free, c, rank_load)
                if (first >= 0).any():
                    k = int(np.argmin(np.where(first >= 0, mb_load, np.inf)))
                    g = self._open(groups, by_size, free, k, int(first[k]), c)
                elif gids and room.any():
                    g = gids[int(np.argmin(np.where(room, load, np.inf)))]
                else:
                    free = np.vstack([free, np.ones((1, W), dtype=bool)])
                    mb_load = np.append(mb_load, 0.0)
                    g = self._open(groups, by_size, free, len(mb_load) - 1, 0, c)
            rec = groups[g]
            rec["ids"].append(int(ids[i]))
            rec["tokens"] += tok
            rec["load"] += sh
            mb_load[rec["mb"]] += F[i]
            rank_load[rec["first"]:rec["first"] + c] += sh
        mbs: list[list[CPGroup]] = [[] for _ in range(len(mb_load))]
        for rec in groups:
            mbs[rec["mb"]].append(CPGroup(tuple(range(rec["first"], rec["first"] + rec["size"])), tuple(rec["ids"]),
                                          Engine.for_size("ring", rec["size"])))
        plan = make_plan(self.name, W, [sorted(gs, key=lambda g: g.ranks[0]) for gs in mbs if gs],
                         max_tokens_per_rank=M, target_flops=target, tolerance=self.tolerance)
        return plan if self.cp_engine == "ring" else assign_engines(plan, self.cp_engine, job, cost_model, batch)

    @staticmethod
    def _open(groups: list[dict], by_size: dict[int, list[int]], free: np.ndarray, k: int, first: int,
              c: int) -> int:
        free[k, first:first + c] = False
        groups.append({"mb": k, "first": first, "size": c, "ids": [], "tokens": 0, "load": 0.0})
        by_size.setdefault(c, []).append(len(groups) - 1)
        return len(groups) - 1
