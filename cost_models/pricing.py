"""Pricing sequences alone in a group (the :class:`~cost_models.base.Pricing` protocol): the default built on
``CostModel.group_costs`` alone, the one rule for a group's fixed overhead, and :func:`pricing_of`, which returns
a cost model's own pricing where it declares one (:class:`~cost_models.base.DeclaresPricing`) and the default
otherwise.

A cost model that implements only the :class:`~cost_models.base.CostModel` protocol (``ConstantCostModel``, a
user's own) gets every policy's and the bound's pricing through :class:`GroupCostsPricing`; a faster pricing
(``AnalyticCostModel``'s, cost_models.analytic_pricing) overrides the alone totals and the stage classes and
must give the same numbers (tests/cost_models/test_pricing.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.base import CostModel, DeclaresPricing, GroupBatch, Pricing

OPTION_KEY_BITS = 20  # an option (size, ulysses) as one integer: size · 2^20 + ulysses (sizes, degrees < 2^20)


def pricing_of(cost_model: CostModel) -> Pricing:
    """The cost model's pricing: its own when it declares one (a ``pricing()`` method,
    :class:`~cost_models.base.DeclaresPricing`), else :class:`GroupCostsPricing` of it."""
    if isinstance(cost_model, DeclaresPricing):
        return cost_model.pricing()
    return GroupCostsPricing(cost_model)


def fixed_from_probes(one: np.ndarray, two: np.ndarray) -> np.ndarray:
    """A group's fixed overhead, the one rule: its cost at zero tokens, extrapolated linearly from its cost
    ``one`` at one token's worth and ``two`` at two tokens' worth, 2·one − two, never negative (a cost affine in
    tokens, a + b·x, gives a exactly). HyDra's :meth:`GroupCostsPricing.group_overhead` (1- and 2-token
    sequences alone) and sim/bound's K (one and two 1-token sequences in a group) read it."""
    return np.maximum(2.0 * np.asarray(one, dtype=np.float64) - two, 0.0)


@dataclass(frozen=True, eq=False)
class GroupCostsPricing:
    """:class:`~cost_models.base.Pricing` from ``cost_model.group_costs`` alone: every stage its own class, each
    sequence alone in a group of its option's size from pool rank 0, no Ulysses or EP floor (0)."""

    cost_model: CostModel

    def _num_stages(self) -> int:
        return int(self.cost_model.job.pp)

    def stage_classes(self) -> tuple[int, ...]:
        return tuple(range(self._num_stages()))

    def compute_stage_classes(self) -> tuple[int, ...]:
        return self.stage_classes()

    def prices_fixed_costs(self) -> bool:
        return True

    def alone_total_s(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                      stage: int = 0) -> np.ndarray:
        return self.alone_stage_totals(lengths, sizes, ulysses, (stage,))[0]

    def alone_stage_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None,
                           option: np.ndarray | None = None) -> list[np.ndarray]:
        L = np.asarray(lengths, dtype=np.int64)
        size, u = np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64)
        if option is not None:
            size, u = size[option], u[option]
        out = []
        for s, k in zip(stages, prefix or (None,) * len(stages)):
            n = len(L) if k is None else k
            gb = GroupBatch(seq_len=L[:n], seq_group=np.arange(n, dtype=np.int64), size=size[:n], ulysses=u[:n],
                            first_rank=np.zeros(n, dtype=np.int64))
            out.append(np.asarray(self.cost_model.group_costs(gb, s).total_s, dtype=np.float64))
        return out

    def alone_block_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None) -> list[np.ndarray]:
        L = np.asarray(lengths, dtype=np.int64)
        n, c = len(np.asarray(sizes)), len(L)
        flat = self.alone_stage_totals(np.tile(L, n), sizes, ulysses, stages, None, np.repeat(np.arange(n), c))
        ks = prefix or (None,) * len(stages)
        return [row.reshape(n, c)[:, :(c if k is None else k)] for row, k in zip(flat, ks)]

    def group_overhead(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        sizes = np.asarray(sizes, dtype=np.int64)
        ulysses = np.asarray(ulysses, dtype=np.int64)
        uniq, inv = np.unique((sizes << OPTION_KEY_BITS) + ulysses, return_inverse=True)  # each option once
        size_u, u_u = uniq >> OPTION_KEY_BITS, uniq & ((1 << OPTION_KEY_BITS) - 1)
        k = len(uniq)
        if k == 0:
            return np.zeros(0)
        lengths = np.r_[np.ones(k, dtype=np.int64), np.full(k, 2, dtype=np.int64)]
        rep = self.stage_classes()
        rows = self.alone_stage_totals(lengths, np.r_[size_u, size_u], np.r_[u_u, u_u], tuple(dict.fromkeys(rep)))
        t = rows[0]
        for row in rows[1:]:  # the heaviest stage (a max is exact in any order)
            t = np.maximum(t, row)
        return fixed_from_probes(t[:k], t[k:])[inv]

    def ulysses_floor(self, tpr: np.ndarray, u: np.ndarray) -> np.ndarray | float:
        return 0.0

    def ep_floor(self, tpr: np.ndarray, stage: int) -> tuple[np.ndarray | float, np.ndarray | float]:
        return 0.0, 0.0
