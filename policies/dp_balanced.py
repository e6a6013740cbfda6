"""Megatron-Core's sequence-packing baseline (``dp-balanced``): ``DpBalancedScheduler``, re-implemented
output-for-output.

Upstream (NVIDIA/Megatron-LM ``dev`` @d48bd6be, ``megatron/core/datasets/data_schedule.py``,
``--sequence-packing-scheduler dp_balanced``) is the baseline Megatron's own dynamic-CP benchmark compares
against. One CP size c for the whole job, DP = W / c replicas. In words:

1. Walk the samples in their original (data) order and pack them into *packed sequences*: a sample joins the
   current pack if the pack's length plus its own stays ≤ c · M (M = ``max_seqlen_per_dp_cp_rank``) and, when
   ``max_num_seqs`` is set, the pack holds fewer than ``max_num_seqs`` samples; otherwise the pack closes and the
   sample opens the next one. (A sample longer than c · M still opens its own pack, so upstream's pack can
   exceed the budget; the policy rejects such a sample as input error.)
2. The number of packs must be a multiple of DP (× ``microbatch_group_size_per_vp_stage`` with virtual
   pipelining): walking back from the last pack, each pack with more than one sample gives its last sample to a
   new single-sample pack appended at the end, until the count is a multiple (packs of one sample are passed
   over). Not enough samples to do so is an error upstream (an assertion), a :class:`PolicyError` here.
3. Microbatch i gives pack i·DP + k to DP replica k, i.e. to ranks k·c … (k+1)·c − 1: every sample of a pack
   is sharded over that replica's c ranks (THD packing, TransformerEngine ring ``p2p``).

:func:`dp_balanced_groups` is the upstream-shaped function (sample positions per microbatch per rank);
the policy turns it into a :class:`~policies.plan.Plan`. Golden cases from the upstream code itself are in
``tests/data/dp_balanced_cases.json`` (sources in ``tests/data/SOURCES.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.engines import ENGINE_CHOICES, engine_for
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.opening import fixed_degree, plan_inputs
from dcpsim.policies.plan import CPGroup, Plan, make_plan
from dcpsim.policies.registry import option, register_policy

if TYPE_CHECKING:
    from dcpsim.traces.batching import GlobalBatch

UPSTREAM = "NVIDIA/Megatron-LM dev@d48bd6be DpBalancedScheduler (megatron/core/datasets/data_schedule.py)"


def _positive(name: str, value: object, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise PolicyError(f"{name} = {value!r} is invalid: a positive integer{' or None' if allow_none else ''}")


def pack_in_order(lengths: Sequence[int], capacity: int, max_num_seqs: int | None = None) -> list[list[int]]:
    """Step 1: positions of ``lengths`` packed in order into packs of ≤ ``capacity`` tokens (and at most
    ``max_num_seqs`` samples)."""
    packs: list[list[int]] = []
    cur: list[int] = []
    total = 0
    for i, L in enumerate(lengths):
        if total + L <= capacity and (max_num_seqs is None or len(cur) < max_num_seqs):
            cur.append(i)
            total += L
        else:
            packs.append(cur)
            cur, total = [i], L
    if cur:
        packs.append(cur)
    return packs


def pad_to_multiple(packs: list[list[int]], multiple: int) -> list[list[int]]:
    """Step 2: split off last samples of the trailing multi-sample packs until len(packs) % multiple == 0."""
    packs = [list(p) for p in packs]
    n = len(packs)
    if n % multiple:
        to_move = multiple - n % multiple
        i = n - 1
        while to_move > 0:
            if i < 0:
                raise PolicyError(f"dp-balanced: {n} packed sequence(s) cannot be split into a multiple of "
                                  f"{multiple} (DP × VPP microbatch group): not enough samples to move "
                                  "(use fewer DP replicas, a smaller budget, or a larger batch)")
            if len(packs[i]) > 1:
                packs.append([packs[i].pop()])
                to_move -= 1
            else:
                i -= 1
    return packs


def dp_balanced_groups(lengths: Sequence[int], cp_size: int, dp_size: int, max_seqlen_per_dp_cp_rank: int,
                       microbatch_group_size_per_vp_stage: int | None = None,
                       max_num_seqs: int | None = None) -> list[list[list[int]]]:
    """Upstream's ``get_groups_and_subsamples``: ``groups[microbatch][rank]`` = the sample positions (indices
    into ``lengths``) that rank processes, for a pool of ``cp_size × dp_size`` ranks."""
    for name, v in (("cp_size", cp_size), ("dp_size", dp_size),
                    ("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank)):
        _positive(name, v, allow_none=False)
    _positive("microbatch_group_size_per_vp_stage", microbatch_group_size_per_vp_stage)
    _positive("max_num_seqs", max_num_seqs)
    lengths = [int(x) for x in lengths]
    packs = pack_in_order(lengths, max_seqlen_per_dp_cp_rank * cp_size, max_num_seqs)
    packs = pad_to_multiple(packs, dp_size * (microbatch_group_size_per_vp_stage or 1))
    return [[packs[i * dp_size + j // cp_size] for j in range(cp_size * dp_size)]
            for i in range(len(packs) // dp_size)]


@register_policy("dp-balanced")
@dataclass(frozen=True)
class DpBalanced:
    """Megatron-Core's order-preserving packing baseline with one CP size.

    ``cp_size``: the CP degree (None: the smallest divisor of the pool whose share of a context window fits the
    budget, as ``static-cp``); ``max_seqlen_per_rank``: M (None: ``cost_model.max_tokens_per_rank()``);
    ``microbatch_group_size_per_vp_stage``: upstream's VPP multiple (None: no VPP); ``max_num_seqs``: cap on
    samples per pack (upstream's ``thd_max_packed_sequences``, None: no cap); ``cp_engine``: ``ring``
    (upstream's TransformerEngine ``p2p``) or another engine choice of policies.engines.
    """

    cp_size: int | None = option(None, ge=1)
    max_seqlen_per_rank: int | None = option(None, ge=1)
    microbatch_group_size_per_vp_stage: int | None = option(None, ge=1)
    max_num_seqs: int | None = option(None, ge=1)
    cp_engine: str = option("ring", choices=ENGINE_CHOICES)
    name: ClassVar[str]  # set by @register_policy

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan:
        inp = plan_inputs(self.name, batch, cost_model, self.max_seqlen_per_rank)
        ids, lengths, budget = inp.ids, inp.lengths, inp.budget
        c = fixed_degree(self.name, "cp_size", self.cp_size, job, budget)
        dp = job.pool // c
        inp.check_fit(c * budget,
                      f"over cp_size × budget = {c} × {budget}; raise cp_size or cut the sequence")
        groups = dp_balanced_groups(lengths.tolist(), c, dp, budget, self.microbatch_group_size_per_vp_stage,
                                    self.max_num_seqs)
        engine = engine_for(self.cp_engine, c, job, cost_model, np.array([job.context_len]))
        mbs = []
        for ranks in groups:
            mbs.append([CPGroup(tuple(range(k * c, (k + 1) * c)), tuple(int(ids[s]) for s in ranks[k * c]), engine)
                        for k in range(dp) if ranks[k * c]])
        return make_plan(self.name, job.pool, mbs, cp_degree=c, max_tokens_per_rank=budget, upstream=UPSTREAM)
