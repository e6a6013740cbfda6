"""Process groups of one CP group and the collectives the engines use.

A CP group of ``c = u · r`` ranks (the plan's ``CPGroup.ranks``, in order) is viewed as ``r`` *outer* groups
of ``u`` consecutive ranks: group rank ``g = j · u + i`` is inner (Ulysses) rank ``i`` of outer group ``j``.
The engines need three kinds of process groups:

* the **Ulysses group** of a rank: the ``u`` ranks of its outer group (all-to-all inside a node);
* the **ring group** of a rank: the ``r`` ranks sharing its inner index ``i`` (one per outer group, in ring
  order ``j = 0..r-1``); they hold the same heads after the all-to-all and pass K/V blocks around;
* the whole **CP group**, only to gather results (tests, validation).

A pure ring engine is ``u = 1``; pure Ulysses is ``r = 1``. Groups of size 1 are never created: their
collectives are no-ops.

``torch.distributed.new_group`` is collective over the *whole world*: every process must call
:func:`new_cp_comm` with the same arguments in the same order, members or not (non-members get ``None``).
The process-group pool of the runner will pre-create these once per possible group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from dcpsim.real_runtime.attention.layout import DualChunkLayout

if TYPE_CHECKING:
    from dcpsim.policies.plan import CPGroup

ProcessGroup = Any  # torch.distributed.ProcessGroup (kept loose: its import path moved across versions)


@dataclass(frozen=True, eq=False)
class CPComm:
    """What one member of a CP group needs to run an engine.

    ``ranks`` are the group's global ranks in group order, ``rank`` this process's index among them,
    ``ulysses``/``ring`` the engine's degrees (``ulysses * ring == len(ranks)``). The process-group fields are
    ``None`` where the matching degree is 1.
    """

    ranks: tuple[int, ...]
    rank: int
    ulysses: int
    ring: int
    group: ProcessGroup | None = None
    ulysses_group: ProcessGroup | None = None
    ring_group: ProcessGroup | None = None

    def __post_init__(self) -> None:
        if self.ulysses < 1 or self.ring < 1 or self.ulysses * self.ring != len(self.ranks):
            raise ValueError(f"CPComm: ulysses ({self.ulysses}) × ring ({self.ring}) must equal the group size "
                             f"{len(self.ranks)} (ranks {self.ranks})")
        if not 0 <= self.rank < len(self.ranks):
            raise ValueError(f"CPComm: rank index {self.rank} is outside the group {self.ranks}")

    @staticmethod
    def single(global_rank: int = 0) -> CPComm:
        """A group of one rank: every engine reduces to local attention, no communication."""
        return CPComm((global_rank,), 0, 1, 1)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def ulysses_rank(self) -> int:
        """Index ``i`` inside the Ulysses (inner) group."""
        return self.rank % self.ulysses

    @property
    def ring_rank(self) -> int:
        """Index ``j`` of this rank's outer group along the ring."""
        return self.rank // self.ulysses

    def ring_neighbours(self) -> tuple[int, int]:
        """Global ranks of the previous and next members of this rank's ring."""
        i, j, u, r = self.ulysses_rank, self.ring_rank, self.ulysses, self.ring
        return self.ranks[((j - 1) % r) * u + i], self.ranks[((j + 1) % r) * u + i]


def new_cp_comm(ranks: Sequence[int], ulysses: int = 1) -> CPComm | None:
    """Create the process groups of a CP group over global ``ranks`` with Ulysses degree ``ulysses``
    (``policies.Engine.ulysses``; the ring degree is ``len(ranks) // ulysses``).

    Collective over the world (see module doc). Returns this process's :class:`CPComm`, or ``None`` if it is
    not a member.
    """
    ranks = tuple(int(x) for x in ranks)
    c = len(ranks)
    if c < 1 or len(set(ranks)) != c:
        raise ValueError(f"new_cp_comm: ranks must be distinct and non-empty, got {ranks}")
    if ulysses < 1 or c % ulysses:
        raise ValueError(f"new_cp_comm: ulysses degree {ulysses} must divide the group size {c}")
    u, r = ulysses, c // ulysses
    me = dist.get_rank()
    member = me in ranks
    whole = dist.new_group(list(ranks)) if c > 1 else None
    inner = None
    if u > 1:
        for j in range(r):
            members = list(ranks[j * u:(j + 1) * u])
            pg = dist.new_group(members)
            if me in members:
                inner = pg
    outer = None
    if r > 1:
        for i in range(u):
            members = [ranks[j * u + i] for j in range(r)]
            pg = dist.new_group(members)
            if me in members:
                outer = pg
    if not member:
        return None
    return CPComm(ranks, ranks.index(me), u, r, whole, inner, outer)


def new_cp_comm_for_group(group: CPGroup) -> CPComm | None:
    """:func:`new_cp_comm` for a plan's ``CPGroup`` (its ranks in order, its engine's Ulysses degree)."""
    return new_cp_comm(group.ranks, group.engine.ulysses)


# ---- ring point-to-point ----------------------------------------------------------------------------------
class RingShift:
    """Send a tensor to the next ring member and receive the previous member's, asynchronously.

    ``wait()`` returns the received tensor. Start it before computing on the current block so the transfer
    overlaps the computation (on NCCL; gloo runs it on background threads)."""

    def __init__(self, tensor: torch.Tensor, comm: CPComm) -> None:
        prev, nxt = comm.ring_neighbours()
        self._buf = torch.empty_like(tensor)
        send = tensor.contiguous()
        self._keep: torch.Tensor | None = send  # the send buffer must stay alive until the transfer completes
        ops = [dist.P2POp(dist.isend, send, nxt, comm.ring_group),
               dist.P2POp(dist.irecv, self._buf, prev, comm.ring_group)]
        self._reqs = dist.batch_isend_irecv(ops)

    def wait(self) -> torch.Tensor:
        for req in self._reqs:
            req.wait()
        self._keep = None
        return self._buf


# ---- Ulysses all-to-all -----------------------------------------------------------------------------------
def _seq_to_head(x: torch.Tensor, comm: CPComm) -> torch.Tensor:
    """``[n, H, D]`` (my tokens, all heads) → ``[u·n, H/u, D]`` (the inner group's tokens, source by source,
    my slice of heads)."""
    u = comm.ulysses
    n, h, d = x.shape
    send = x.reshape(n, u, h // u, d).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=comm.ulysses_group)
    return recv.reshape(u * n, h // u, d)


def _head_to_seq(x: torch.Tensor, comm: CPComm) -> torch.Tensor:
    """Inverse of :func:`_seq_to_head`: ``[u·n, H/u, D]`` → ``[n, H, D]``."""
    u = comm.ulysses
    un, hu, d = x.shape
    send = x.reshape(u, un // u, hu, d).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=comm.ulysses_group)
    return recv.transpose(0, 1).reshape(un // u, u * hu, d)


class _SeqToHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _seq_to_head(x, comm)

    @staticmethod
    def backward(ctx, grad):
        return _head_to_seq(grad.contiguous(), ctx.comm), None


class _HeadToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _head_to_seq(x, comm)

    @staticmethod
    def backward(ctx, grad):
        return _seq_to_head(grad.contiguous(), ctx.comm), None


def seq_to_head(x: torch.Tensor, comm: CPComm) -> torch.Tensor:
    """Differentiable Ulysses all-to-all from sequence-sharded to head-sharded (identity when ``u == 1``)."""
    return x if comm.ulysses == 1 else _SeqToHead.apply(x, comm)


def head_to_seq(x: torch.Tensor, comm: CPComm) -> torch.Tensor:
    """Differentiable inverse all-to-all, head-sharded back to sequence-sharded."""
    return x if comm.ulysses == 1 else _HeadToSeq.apply(x, comm)


# ---- gathering results ------------------------------------------------------------------------------------
def gather_packed(local: torch.Tensor, layout: DualChunkLayout, comm: CPComm) -> torch.Tensor:
    """All-gather every member's shard and return the global packed tensor without pads (on every member).
    Not differentiable; for tests, validation and logging."""
    if comm.size != layout.degree:
        raise ValueError(f"gather_packed: layout degree {layout.degree} ≠ CP group size {comm.size}")
    if comm.size == 1:
        return layout.unshard([local])
    shards = [torch.empty_like(local) for _ in range(comm.size)]
    dist.all_gather(shards, local.contiguous(), group=comm.group)
    return layout.unshard(shards)
