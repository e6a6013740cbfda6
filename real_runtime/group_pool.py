"""The process-group pool: every CP group a run may use, created once at start-up, looked up per microbatch.

Why a pool
----------
``torch.distributed.new_group`` is collective over the *whole world* (every process must call it with the
same ranks in the same order, members or not), and creating an NCCL communicator costs tens to hundreds of
milliseconds. A dynamic-CP plan changes its CP groups every microbatch, so the runner cannot create them on the
fly: it creates every group it will need once, in one deterministic order on all processes, before the first
iteration, and then only looks them up.

What is created
---------------
A CP group is identified by a :class:`GroupKey`: its global ranks in group order and its engine's Ulysses
degree ``u`` (the ring degree is ``r = size / u``; ``ring`` is ``u = 1``, ``ulysses`` is ``r = 1``). Its engine
needs up to three kinds of process groups (see :mod:`real_runtime.attention.comm`): the whole group, the
``r`` inner Ulysses groups of ``u`` consecutive members, and the ``u`` outer ring groups of ``r`` members with
the same inner index. Different keys share process groups whenever they need the same *set* of ranks (the
inner Ulysses group ``(0, 1)`` of ``hybrid(2, 2)`` on ranks 0..3 is also the whole group of a ring on ranks
0, 1), so the pool creates each distinct rank set exactly once, in the order (size, ranks), and assembles one
:class:`~real_runtime.attention.comm.CPComm` per key from them. Groups of one rank need no process group.

Which keys: :meth:`GroupPool.for_plans` takes exactly those the given plans name (every process computes the
same plans, so every process computes the same list); :func:`aligned_keys` lists every aligned power-of-two
block of the pool for given Ulysses degrees, for runs that plan on the fly, and :meth:`GroupPool.create`
accepts any union of the two.

Rank order: torch orders a process group's members by global rank, so the all-to-all of a Ulysses group
follows ascending global ranks. A key whose inner groups are not ascending is rejected; pure rings may list
their ranks in any order (their point-to-point calls address peers by global rank).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcpsim.policies.plan import CPGroup, Engine, Plan

ProcessGroup = Any  # torch.distributed.ProcessGroup


class GroupPoolError(ValueError):
    """A CP group that the pool cannot create or does not hold (with the ranks and engine named)."""


@dataclass(frozen=True, order=True)
class GroupKey:
    """One CP group as the pool knows it: global ``ranks`` in group order and the Ulysses degree."""

    ranks: tuple[int, ...]
    ulysses: int = 1

    def __post_init__(self) -> None:
        c = len(self.ranks)
        if c < 1 or len(set(self.ranks)) != c or min(self.ranks) < 0:
            raise GroupPoolError(f"group ranks {self.ranks} must be distinct, non-negative and non-empty")
        if self.ulysses < 1 or c % self.ulysses:
            raise GroupPoolError(f"Ulysses degree {self.ulysses} must divide the group size {c} (ranks "
                                 f"{self.ranks})")
        for j in range(self.ring):
            inner = self.ranks[j * self.ulysses:(j + 1) * self.ulysses]
            if self.ulysses > 1 and list(inner) != sorted(inner):
                raise GroupPoolError(f"group {self.ranks} with Ulysses degree {self.ulysses}: inner group "
                                     f"{inner} must list its ranks in ascending order (torch orders a "
                                     f"process group by global rank)")

    @staticmethod
    def of(group: CPGroup) -> GroupKey:
        """The key of a plan's CP group."""
        return GroupKey(tuple(int(r) for r in group.ranks), int(group.engine.ulysses))

    @staticmethod
    def for_engine(ranks: Sequence[int], engine: Engine) -> GroupKey:
        if engine.size != len(ranks):
            raise GroupPoolError(f"engine {engine} has size {engine.size} but the group has ranks {tuple(ranks)}")
        return GroupKey(tuple(int(r) for r in ranks), int(engine.ulysses))

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def ring(self) -> int:
        return self.size // self.ulysses

    def inner_sets(self) -> list[tuple[int, ...]]:
        """The ``r`` Ulysses groups (consecutive members), in outer order; empty when ``u = 1``."""
        u = self.ulysses
        return [] if u == 1 else [self.ranks[j * u:(j + 1) * u] for j in range(self.ring)]

    def outer_sets(self) -> list[tuple[int, ...]]:
        """The ``u`` ring groups (same inner index), in inner order; empty when ``r = 1``."""
        u, r = self.ulysses, self.ring
        return [] if r == 1 else [tuple(self.ranks[j * u + i] for j in range(r)) for i in range(u)]

    def rank_sets(self) -> list[tuple[int, ...]]:
        """Every process group this key's engine needs, as sorted rank tuples (no duplicates)."""
        if self.size == 1:
            return []
        sets = [self.ranks, *self.inner_sets(), *self.outer_sets()]
        return sorted({tuple(sorted(s)) for s in sets}, key=_set_order)

    def __str__(self) -> str:
        u, r = self.ulysses, self.ring
        kind = "ring" if u == 1 else "ulysses" if r == 1 else f"hybrid({u},{r})"
        return f"{kind} on ranks {list(self.ranks)}"


def _set_order(s: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    return len(s), s


def keys_for_plans(plans: Iterable[Plan]) -> list[GroupKey]:
    """The distinct keys of every CP group of more than one rank in ``plans``, sorted."""
    return sorted({GroupKey.of(g) for p in plans for mb in p.microbatches for g in mb.groups if g.size > 1})


def aligned_keys(world: int, ulysses_degrees: Iterable[int] = (1,)) -> list[GroupKey]:
    """Every aligned block of a power-of-two size ≥ 2 in a pool of ``world`` ranks (ranks ``k·c .. k·c+c-1``),
    once per Ulysses degree in ``ulysses_degrees`` that divides the size."""
    us = sorted({int(u) for u in ulysses_degrees} | {1})
    out = []
    c = 2
    while c <= world:
        for start in range(0, world - c + 1, c):
            out += [GroupKey(tuple(range(start, start + c)), u) for u in us if c % u == 0]
        c *= 2
    return out


def process_group_sets(keys: Iterable[GroupKey]) -> list[tuple[int, ...]]:
    """The distinct rank sets the keys need, in creation order: by size, then ranks."""
    return sorted({s for k in keys for s in k.rank_sets()}, key=_set_order)


@dataclass(frozen=True, eq=False)
class GroupPool:
    """Pre-created CP communicators of one process, by :class:`GroupKey`.

    ``comms`` holds this process's :class:`CPComm` for every key it is a member of (``None`` for keys it is
    not in); ``created`` lists the rank sets whose process groups were created, in creation order.
    """

    world: int
    rank: int
    comms: dict[GroupKey, Any]
    created: tuple[tuple[int, ...], ...]
    _groups: dict[tuple[int, ...], ProcessGroup] = field(default_factory=dict, repr=False)

    # ---- construction (collective) --------------------------------------------------------------------
    @classmethod
    def create(cls, keys: Iterable[GroupKey], *, world: int | None = None, rank: int | None = None,
               new_group: Callable[[list[int]], ProcessGroup] | None = None) -> GroupPool:
        """Create the process groups of ``keys`` on this process. Collective over the world: every process
        must call it with the same keys (any order; they are sorted here). ``new_group`` defaults to
        ``torch.distributed.new_group`` (tests pass a counting wrapper)."""
        from dcpsim.real_runtime.attention.comm import CPComm

        if world is None or rank is None or new_group is None:
            import torch.distributed as dist

            world = dist.get_world_size() if world is None else world
            rank = dist.get_rank() if rank is None else rank
            new_group = dist.new_group if new_group is None else new_group
        keys = sorted(set(keys))
        for k in keys:
            if max(k.ranks) >= world:
                raise GroupPoolError(f"{k} uses rank {max(k.ranks)}, but the world has {world} ranks")
        sets = process_group_sets(keys)
        groups = {s: new_group(list(s)) for s in sets}  # the one collective, in a fixed order

        def pg(members: Sequence[int]) -> ProcessGroup:
            return groups[tuple(sorted(members))]

        comms: dict[GroupKey, Any] = {}
        for k in keys:
            if rank not in k.ranks:
                comms[k] = None
                continue
            me = k.ranks.index(rank)
            inner = next((pg(s) for s in k.inner_sets() if rank in s), None)
            outer = next((pg(s) for s in k.outer_sets() if rank in s), None)
            comms[k] = CPComm(k.ranks, me, k.ulysses, k.ring, pg(k.ranks) if k.size > 1 else None, inner, outer)
        return cls(int(world), int(rank), comms, tuple(sets), groups)

    @classmethod
    def for_plans(cls, plans: Iterable[Plan], *, aligned: bool = False, ulysses_degrees: Iterable[int] = (1,),
                  **kw: Any) -> GroupPool:
        """A pool with exactly the groups ``plans`` use (plus every aligned block when ``aligned``)."""
        plans = list(plans)
        keys = set(keys_for_plans(plans))
        if aligned:
            world = kw.get("world")
            if world is None:
                import torch.distributed as dist

                world = dist.get_world_size()
            keys |= set(aligned_keys(int(world), ulysses_degrees))
        return cls.create(keys, **kw)

    # ---- look-up ---------------------------------------------------------------------------------------
    @property
    def keys(self) -> list[GroupKey]:
        return sorted(self.comms)

    def __contains__(self, key: GroupKey) -> bool:
        return key in self.comms

    def process_group(self, ranks: Sequence[int]) -> ProcessGroup:
        """The process group of a rank set (any order) created by this pool."""
        try:
            return self._groups[tuple(sorted(int(r) for r in ranks))]
        except KeyError:
            raise GroupPoolError(f"no process group over ranks {sorted(ranks)} in the pool") from None

    def comm(self, ranks: Sequence[int], engine: Engine):
        """This process's :class:`CPComm` for the CP group (``ranks``, ``engine``). A group of one rank needs
        nothing pre-created. Raises :class:`GroupPoolError` when the group was not created at start-up or
        this process is not a member."""
        from dcpsim.real_runtime.attention.comm import CPComm

        key = GroupKey.for_engine(ranks, engine)
        if self.rank not in key.ranks:
            raise GroupPoolError(f"rank {self.rank} is not a member of the {key}")
        if key.size == 1:
            return CPComm.single(self.rank)
        if key not in self.comms:
            raise GroupPoolError(f"the {key} was not created at start-up; create the pool from the plans that "
                                 f"will run (GroupPool.for_plans) or add its key")
        return self.comms[key]

    def comm_for(self, group: CPGroup):
        """:meth:`comm` for a plan's CP group."""
        return self.comm(group.ranks, group.engine)
