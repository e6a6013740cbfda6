"""The cost-model interface the simulator and the policies speak.

All functions are vectorised over groups (numpy arrays): the simulator prices a whole plan in a few array
operations, never per token or per sequence in Python. Times are seconds *per pipeline stage* (the stage's
``JobSpec.stage_layers(stage)`` layers) for one rank of a CP group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dcpsim.cost_models.specs import JobSpec

ENGINE_RING, ENGINE_ULYSSES, ENGINE_HYBRID = "ring", "ulysses", "hybrid"


@dataclass(frozen=True)
class GroupBatch:
    """Flattened CP groups of a plan (or of candidate placements).

    ``seq_len[i]`` is sequence i's length in tokens and ``seq_group[i]`` the index of its group; per group:
    ``size`` (CP degree c), ``ulysses`` (inner all-to-all degree u; the ring degree is c / u) and
    ``first_rank`` (pool index of its first member, used for topology). Optionally every group's members,
    ``member_rank[j]`` in group ``member_group[j]`` (groups in order, each group's members consecutive, in
    the group's rank order): the cost model then prices the links between the ranks a group really lists
    (a non-contiguous group such as ranks 0 and 8); without them a group is the contiguous ranks from
    ``first_rank``.
    """

    seq_len: np.ndarray  # int64 [n]
    seq_group: np.ndarray  # int64 [n]
    size: np.ndarray  # int64 [G]
    ulysses: np.ndarray  # int64 [G]
    first_rank: np.ndarray  # int64 [G]
    member_rank: np.ndarray | None = None  # int64 [Σ size], or None: contiguous from first_rank
    member_group: np.ndarray | None = None  # int64 [Σ size]

    @property
    def num_groups(self) -> int:
        return int(self.size.shape[0])

    def tokens(self) -> np.ndarray:
        """Σ L over each group's sequences (float64 [G])."""
        return np.bincount(self.seq_group, weights=self.seq_len, minlength=self.num_groups)

    def tokens_per_rank(self) -> np.ndarray:
        return self.tokens() / self.size


@dataclass(frozen=True)
class GroupCosts:
    """Per group, for one rank of the group at one stage (seconds): compute, *exposed* CP communication,
    exposed TP (sequence-parallel) communication and the MoE expert-parallel all-to-alls, forward and backward.
    The TP and EP fields default to 0 (a scalar broadcasts) for cost models (or models) without them."""

    fwd_compute_s: np.ndarray
    fwd_comm_s: np.ndarray
    bwd_compute_s: np.ndarray
    bwd_comm_s: np.ndarray
    fwd_tp_comm_s: np.ndarray | float = 0.0
    bwd_tp_comm_s: np.ndarray | float = 0.0
    fwd_ep_comm_s: np.ndarray | float = 0.0  # EP dispatch + combine all-to-alls (cost_models.moe), not hidden
    bwd_ep_comm_s: np.ndarray | float = 0.0

    @property
    def total_s(self) -> np.ndarray:
        return (self.fwd_compute_s + self.fwd_comm_s + self.bwd_compute_s + self.bwd_comm_s
                + self.fwd_tp_comm_s + self.bwd_tp_comm_s + self.fwd_ep_comm_s + self.bwd_ep_comm_s)


class CostModel(Protocol):
    """Prices operations of a job. Implementations: ``AnalyticCostModel`` (docs/cost_model.md, calibrated) and
    ``ConstantCostModel`` (tests)."""

    @property
    def job(self) -> JobSpec:
        """The job being priced. Read-only here, so frozen dataclasses (whose fields cannot be set) satisfy
        the protocol under a type checker."""
        ...

    def group_costs(self, groups: GroupBatch, stage: int = 0) -> GroupCosts:
        """Compute and exposed CP communication of each group at ``stage``."""
        ...

    def pp_transfer_s(self, tokens_per_rank: np.ndarray, stage: int, rank: np.ndarray | int) -> np.ndarray:
        """Time to send one microbatch's activations (or gradients) of ``tokens_per_rank`` tokens per rank
        from pool rank(s) ``rank`` of ``stage`` to the same pool rank(s) of ``stage + 1`` (arrays broadcast)."""
        ...

    def grad_sync_s(self, stage: int) -> float:
        """Reduce-scatter + all-gather of the stage's gradients / parameters over the pool."""
        ...

    def optimizer_s(self, stage: int) -> float:
        """The optimizer step on one rank's shard."""
        ...

    def max_tokens_per_rank(self) -> int:
        """Per-rank token budget of one microbatch (from memory, unless the job overrides it)."""
        ...

    def peak_memory_gb(self, max_tokens_in_flight: np.ndarray, stage: int, largest_tokens: np.ndarray | None = None,
                       cp_tokens: np.ndarray | None = None) -> np.ndarray:
        """Peak memory per rank given the tokens of its in-flight microbatches summed, of its largest
        microbatch and of its largest microbatch with CP degree > 1 (the last two: transient buffers;
        ``None``: bounded by the first) (10^9 bytes)."""
        ...

    def model_flops(self, lengths: np.ndarray) -> float:
        """Model FLOPs of one training step over sequences of ``lengths`` (forward + backward, all layers)."""
        ...


class Pricing(Protocol):
    """How policies and the bound price sequences *alone in a group*, by option (an option: a group size and an
    inner Ulysses degree), and what they read off such prices. Every cost model has one:
    :func:`cost_models.pricing.pricing_of` returns the model's own (a faster one, declared by a ``pricing()``
    method: :class:`DeclaresPricing`) or the default built on :meth:`CostModel.group_costs` alone
    (:class:`cost_models.pricing.GroupCostsPricing`); both give the same numbers.

    "Alone" means each sequence in its own group of that size, contiguous from pool rank 0. Lengths,
    sizes and degrees are arrays; each method is vectorised over them.

    HyDra asks it everything through policies/hydra/pricing.py, one function per question:

    ==========================================================  ===============================================
    ``stage_classes_of(cm)``                                    :meth:`stage_classes`
    ``stage_times(L, c, u, cm, stages, option)``                :meth:`alone_stage_totals` (one row per class)
    ``block_times(L, c, u, cm, classes, prefix)``               :meth:`alone_block_totals`
    ``group_overhead(c, u, cm)``                                :meth:`group_overhead`
    ``prices_fixed_costs(cm)``                                  :meth:`prices_fixed_costs`
    ==========================================================  ===============================================

    and sim/bound.py reads :meth:`compute_stage_classes`, :meth:`ulysses_floor` and :meth:`ep_floor`.
    """

    def stage_classes(self) -> tuple[int, ...]:
        """Per pipeline stage, the first stage whose ``group_costs`` are the same numbers for every group batch
        (a caller pricing several stages prices one of each class)."""
        ...

    def compute_stage_classes(self) -> tuple[int, ...]:
        """Per pipeline stage, the first stage whose compute and TP communication (``fwd_compute_s``,
        ``bwd_compute_s``, the TP fields; CP communication may differ) are the same numbers for every group
        batch: classes at least as coarse as :meth:`stage_classes`' (sim/bound reads no CP communication)."""
        ...

    def prices_fixed_costs(self) -> bool:
        """Whether the model prices the per-layer, per-ring-step and per-microbatch fixed costs
        (``CostTerms.fixed_costs``; a model without terms does)."""
        ...

    def alone_total_s(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                      stage: int = 0) -> np.ndarray:
        """``group_costs(...).total_s`` of each length alone in a group of ``sizes`` ranks with inner degree
        ``ulysses`` at ``stage`` (elementwise over the three arrays)."""
        ...

    def alone_stage_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None,
                           option: np.ndarray | None = None) -> list[np.ndarray]:
        """Row i: :meth:`alone_total_s` of the first ``prefix[i]`` lengths (None: all) at ``stages[i]``. With
        ``option``, ``sizes`` and ``ulysses`` list the distinct options and length j is in a group like option
        ``option[j]``."""
        ...

    def alone_block_totals(self, lengths: np.ndarray, sizes: np.ndarray, ulysses: np.ndarray,
                           stages: tuple[int, ...], prefix: tuple[int | None, ...] | None = None) -> list[np.ndarray]:
        """Row i: [options, k] totals of every option (``sizes``, ``ulysses``) at each of the first k =
        ``prefix[i]`` lengths (None: all) at ``stages[i]``."""
        ...

    def group_overhead(self, sizes: np.ndarray, ulysses: np.ndarray) -> np.ndarray:
        """A group's fixed time (s) per option, at the stage where it is largest: its alone total at zero
        tokens, extrapolated from 1 and 2 tokens (:func:`cost_models.pricing.fixed_from_probes`)."""
        ...

    def ulysses_floor(self, tpr: np.ndarray, u: np.ndarray) -> np.ndarray | float:
        """A lower bound on the exposed Ulysses all-to-all seconds per rank of one forward (equally one
        backward) of a group with inner degree ``u`` holding ``tpr`` tokens per rank, affine in ``tpr``, below
        the CP communication the model prices wherever the group sits (docs/bound.md, assumption U). The
        default is 0 (CP communication is never negative)."""
        ...

    def ep_floor(self, tpr: np.ndarray, stage: int) -> tuple[np.ndarray | float, np.ndarray | float]:
        """(forward, backward) lower bounds on the exposed MoE expert-parallel communication seconds per rank
        (``GroupCosts.fwd_ep_comm_s`` / ``bwd_ep_comm_s``) of a group at ``stage`` holding ``tpr`` tokens per
        rank, affine in ``tpr``, wherever the group sits (docs/bound.md, assumption E). The default is 0."""
        ...


@runtime_checkable
class DeclaresPricing(Protocol):
    """A cost model that supplies its own :class:`Pricing` (``AnalyticCostModel``: a faster one, the same
    numbers). :func:`cost_models.pricing.pricing_of` checks this protocol; a cost model without it is priced
    through ``group_costs``."""

    def pricing(self) -> Pricing:
        ...
