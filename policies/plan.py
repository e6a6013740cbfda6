"""The Plan: what a policy decides and what the simulator and the real runtime execute.

A plan is an ordered list of microbatches. Each microbatch partitions (some of) the pool ranks ``0..W-1``
into CP groups; each group shards every one of its sequences over all of its members and runs one CP engine.
The same grouping holds at every pipeline stage. Plans round-trip through JSON.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from dcpsim.policies.errors import PlanError

ENGINE_KINDS = ("ring", "ulysses", "hybrid")


@dataclass(frozen=True)
class Engine:
    """A CP engine: Ulysses (all-to-all) over ``ulysses`` inner ranks, nested in a ring over ``ring`` outer
    groups. ``ring`` = pure ring (ulysses = 1), ``ulysses`` = pure all-to-all (ring = 1)."""

    kind: str = "ring"
    ulysses: int = 1
    ring: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise PlanError(f"engine kind {self.kind!r} is unknown; valid: {', '.join(ENGINE_KINDS)}")
        if self.ulysses < 1 or self.ring < 1:
            raise PlanError(f"engine {self} needs ulysses ≥ 1 and ring ≥ 1")
        if self.kind == "ring" and self.ulysses != 1:
            raise PlanError(f"a ring engine has ulysses = 1, got {self.ulysses}")
        if self.kind == "ulysses" and self.ring != 1:
            raise PlanError(f"a ulysses engine has ring = 1, got {self.ring}")

    @property
    def size(self) -> int:
        return self.ulysses * self.ring

    @staticmethod
    def for_size(kind: str, size: int, ulysses: int = 1) -> Engine:
        """The engine of ``kind`` for a group of ``size`` ranks (``ulysses`` only for hybrid)."""
        if kind == "ring":
            return Engine("ring", 1, size)
        if kind == "ulysses":
            return Engine("ulysses", size, 1)
        if kind == "hybrid":
            if ulysses < 1 or size % ulysses:
                raise PlanError(f"hybrid ulysses degree {ulysses} does not divide the group size {size}")
            return Engine("hybrid", ulysses, size // ulysses)
        raise PlanError(f"engine kind {kind!r} is unknown; valid: {', '.join(ENGINE_KINDS)}")

    def __str__(self) -> str:
        if self.kind == "hybrid":
            return f"hybrid({self.ulysses},{self.ring})"
        return self.kind

    @staticmethod
    def parse(text: str, size: int) -> Engine:
        m = re.fullmatch(r"hybrid\((\d+),(\d+)\)", text.replace(" ", ""))
        if m:
            return Engine("hybrid", int(m.group(1)), int(m.group(2)))
        return Engine.for_size(text, size)


@dataclass(frozen=True, slots=True)
class CPGroup:
    """Ranks of one CP group (in ring order), the sequences it processes (placement order), its engine."""

    ranks: tuple[int, ...]
    seq_ids: tuple[int, ...]
    engine: Engine

    @property
    def size(self) -> int:
        return len(self.ranks)

    @classmethod
    def many(cls, ranks: Sequence[tuple[int, ...]], seq_ids: Sequence[tuple[int, ...]],
             engines: Sequence[Engine]) -> list[CPGroup]:
        """``[CPGroup(r, s, e) for r, s, e in zip(ranks, seq_ids, engines)]`` without the frozen dataclass's
        three ``object.__setattr__`` calls per group and with no Python call per group: the objects made, then
        each slot written through its descriptor, by ``map`` over C callables (policies that build thousands of
        groups per plan use it). The same objects: a CPGroup has no checks of its own to skip (the plan
        validator checks plans)."""
        if not len(ranks) == len(seq_ids) == len(engines):
            raise ValueError(f"CPGroup.many: {len(ranks)} rank tuples, {len(seq_ids)} sequence tuples and "
                             f"{len(engines)} engines; one of each per group")
        groups = list(map(object.__new__, repeat(cls, len(ranks))))
        for setter, values in ((_SET_RANKS, ranks), (_SET_SEQ_IDS, seq_ids), (_SET_ENGINE, engines)):
            deque(map(setter, groups, values), maxlen=0)
        return groups


# the slots' own setters (a frozen dataclass's __setattr__ refuses every write)
_SET_RANKS = CPGroup.__dict__["ranks"].__set__
_SET_SEQ_IDS = CPGroup.__dict__["seq_ids"].__set__
_SET_ENGINE = CPGroup.__dict__["engine"].__set__


@dataclass(frozen=True)
class Microbatch:
    groups: tuple[CPGroup, ...]


@dataclass(frozen=True)
class Plan:
    """An ordered list of microbatches over a pool of ``pool_size`` ranks, made by ``policy``."""

    policy: str
    pool_size: int
    microbatches: tuple[Microbatch, ...]
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def num_microbatches(self) -> int:
        return len(self.microbatches)

    def degrees(self) -> dict[int, int]:
        """CP degree of every sequence id."""
        return {s: g.size for mb in self.microbatches for g in mb.groups for s in g.seq_ids}

    # ---- JSON -------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "pool_size": self.pool_size,
            "meta": dict(self.meta),
            "microbatches": [
                {"groups": [{"ranks": list(g.ranks), "seq_ids": list(g.seq_ids), "engine": str(g.engine)}
                            for g in mb.groups]}
                for mb in self.microbatches
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Plan:
        try:
            mbs = tuple(
                Microbatch(tuple(
                    CPGroup(tuple(int(r) for r in g["ranks"]), tuple(int(s) for s in g["seq_ids"]),
                            Engine.parse(str(g["engine"]), len(g["ranks"])))
                    for g in mb["groups"]))
                for mb in d["microbatches"])
            return Plan(str(d["policy"]), int(d["pool_size"]), mbs, dict(d.get("meta", {})))
        except (KeyError, TypeError) as e:
            raise PlanError(f"malformed plan JSON: missing or bad field {e}") from None

    @staticmethod
    def from_json(text: str) -> Plan:
        return Plan.from_dict(json.loads(text))


def make_plan(policy: str, pool_size: int, microbatches: Iterable[Iterable[CPGroup]],
              **meta: Any) -> Plan:
    """Convenience constructor from nested iterables of groups."""
    return Plan(policy, pool_size, tuple(Microbatch(tuple(gs)) for gs in microbatches), meta)

