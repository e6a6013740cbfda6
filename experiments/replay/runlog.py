"""The run-log format: measured training iterations with their exact placement (JSON Lines).

Line 1 is the job record, every further line one iteration::

    {"kind": "job", "format": "dcpsim-runlog/1", "dataset": "distca/64k", "covers": "...",
     "job": {"model": "llama3-8b", "layers": 8, "gpu": "h200", "tp": 8, "pp": 1, "dp": 2, "cp": 1, "ep": 1,
             "tp_comm_overlap": 0.0, "attention_backend": null}}
    {"kind": "iteration", "step": 0, "measured_s": 0.9837,
     "microbatches": [{"groups": [{"ranks": [0], "docs": [12786, 28848], "engine": "ring"}, ...],
                       "measured_s": null}]}

``model`` is a preset, a model file (Hugging Face config.json or model TOML) or an object of ModelSpec fields;
``layers`` (optional) cuts it to that many decoder layers; ``grad_sync`` (default true) says whether the measured
step included the DP gradient reduction; ``tp_comm_overlap`` and ``attention_backend`` are the JobSpec fields. The
pool is ``dp × cp`` ranks (``0 .. dp·cp − 1``); each microbatch partitions them into CP groups, each group holding
its documents (lengths in tokens) and its CP engine (``ring``, ``ulysses``, ``hybrid(u,r)``). ``measured_s`` is the
iteration's measured time in seconds (what it covers: the job record's ``covers``). An iteration may instead give
``"plan"`` (a plan JSON, as ``dcpsim simulate --plan-out`` writes it) and ``"lengths"`` (``{"seq_id": tokens}``).

Reading checks every field and raises :class:`LogError` (one line: file, line, field, value, what is valid).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcpsim.experiments.errors import ScenarioError
from dcpsim.userfile import read_text

FORMAT = "dcpsim-runlog/1"
JOB_INTS = ("tp", "pp", "dp", "cp", "ep")


class LogError(ScenarioError):
    """A malformed run log (the CLI prints it as one line and exits 2)."""


@dataclass(frozen=True)
class Group:
    """One CP group of one microbatch: its pool ranks (ring order), its documents (tokens), its engine."""

    ranks: tuple[int, ...]
    docs: tuple[int, ...]
    engine: str = "ring"


@dataclass(frozen=True)
class Iteration:
    step: int
    measured_s: float
    microbatches: tuple[tuple[Group, ...], ...]
    microbatch_s: tuple[float | None, ...] = ()  # optional measured time per microbatch

    @property
    def tokens(self) -> int:
        return sum(sum(g.docs) for mb in self.microbatches for g in mb)


@dataclass(frozen=True)
class RunLog:
    """A job and its measured iterations."""

    job: Mapping[str, Any]
    iterations: tuple[Iteration, ...]
    dataset: str = ""
    covers: str = ""
    source: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pool(self) -> int:
        return int(self.job["dp"]) * int(self.job["cp"])

    def to_lines(self) -> list[str]:
        head = {"kind": "job", "format": FORMAT, "dataset": self.dataset, "covers": self.covers,
                "source": self.source, "job": dict(self.job), "meta": dict(self.meta)}
        lines = [json.dumps(head, sort_keys=True)]
        for it in self.iterations:
            rec: dict[str, Any] = {"kind": "iteration", "step": it.step, "measured_s": it.measured_s,
                                   "microbatches": [{"groups": [{"ranks": list(g.ranks), "docs": list(g.docs),
                                                                 "engine": g.engine} for g in mb]}
                                                    for mb in it.microbatches]}
            for mb, t in zip(rec["microbatches"], it.microbatch_s):
                if t is not None:
                    mb["measured_s"] = t
            lines.append(json.dumps(rec, sort_keys=True))
        return lines

    def with_iterations(self, iterations: Iterable[Iteration]) -> RunLog:
        return RunLog(self.job, tuple(iterations), self.dataset, self.covers, self.source, self.meta)


def write_log(log: RunLog, path: str | Path) -> None:
    """Write ``log`` as JSON Lines; all or nothing (a temporary file renamed into place)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text("\n".join(log.to_lines()) + "\n")
        tmp.replace(p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise LogError(f"cannot write run log {p}: {e.strerror}") from None


def read_log(path: str | Path) -> RunLog:
    p = Path(path)
    return parse_log(read_text(p, "run log", error=LogError).splitlines(), str(p))


def parse_log(lines: Iterable[str], origin: str = "run log") -> RunLog:
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise LogError(f"{origin}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise LogError(f"{origin}:{n}: a record is a JSON object, got {type(rec).__name__}")
        records.append((n, rec))
    if not records:
        raise LogError(f"{origin}: empty run log; expected a job record and at least one iteration")
    n0, head = records[0]
    if head.get("kind") != "job":
        raise LogError(f"{origin}:{n0}: kind = {head.get('kind')!r}; the first record must be the job "
                       "(kind 'job')")
    job = _job(head.get("job"), f"{origin}:{n0}")
    pool = int(job["dp"]) * int(job["cp"])
    its = [_iteration(rec, pool, f"{origin}:{n}") for n, rec in records[1:]]
    if not its:
        raise LogError(f"{origin}: no iteration records after the job record")
    return RunLog(job, tuple(its), str(head.get("dataset", "")), str(head.get("covers", "")),
                  str(head.get("source", "")), dict(head.get("meta") or {}))


def _fail(where: str, name: str, value: Any, valid: str) -> LogError:
    return LogError(f"{where}: {name} = {value!r} is invalid: expected {valid}")


def _job(d: Any, where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise _fail(where, "job", d, "an object with model, gpu, tp, pp, dp, cp")
    if not (isinstance(d.get("model"), str) and d["model"]) and not isinstance(d.get("model"), dict):
        raise _fail(where, "job.model", d.get("model"), "a preset name, a model file path or an object of "
                    "ModelSpec fields (name, hidden, ffn, layers, heads, kv_heads, head_dim, vocab, ...)")
    if not isinstance(d.get("gpu"), str) or not d["gpu"]:
        raise _fail(where, "job.gpu", d.get("gpu"), "a GPU preset name")
    out = dict(d)
    for key in JOB_INTS:
        v = d.get(key, 1 if key in ("pp", "ep", "cp") else None)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _fail(where, f"job.{key}", v, "a positive integer")
        out[key] = v
    if "layers" in d and d["layers"] is not None:
        v = d["layers"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _fail(where, "job.layers", v, "a positive integer (decoder layers) or null")
    if not isinstance(d.get("grad_sync", True), bool):
        raise _fail(where, "job.grad_sync", d.get("grad_sync"), "true (the measured step reduced gradients over "
                    "DP) or false")
    ov = d.get("tp_comm_overlap", 0.0)
    if isinstance(ov, bool) or not isinstance(ov, (int, float)) or not 0 <= ov <= 1:
        raise _fail(where, "job.tp_comm_overlap", ov, "a fraction between 0 and 1")
    return out


def _measured(v: Any, where: str, name: str, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise _fail(where, name, v, "a positive finite time in seconds")
    return float(v)


def _iteration(rec: dict[str, Any], pool: int, where: str) -> Iteration:
    if rec.get("kind") != "iteration":
        raise _fail(where, "kind", rec.get("kind"), "'iteration' (only the first record is the job)")
    step = rec.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int):
        raise _fail(where, "step", step, "an integer")
    measured = _measured(rec.get("measured_s"), where, "measured_s")
    assert measured is not None
    if "plan" in rec:
        mbs = _from_plan(rec.get("plan"), rec.get("lengths"), pool, where)
        return Iteration(step, measured, mbs)
    raw = rec.get("microbatches")
    if not isinstance(raw, list) or not raw:
        raise _fail(where, "microbatches", raw, "a non-empty list of {groups: [...]}")
    mbs_l, times = [], []
    for k, mb in enumerate(raw):
        w = f"{where}: microbatch {k}"
        if not isinstance(mb, dict) or not isinstance(mb.get("groups"), list) or not mb["groups"]:
            raise _fail(w, "groups", mb.get("groups") if isinstance(mb, dict) else mb,
                        "a non-empty list of {ranks, docs, engine}")
        mbs_l.append(tuple(_group(g, pool, f"{w}, group {j}") for j, g in enumerate(mb["groups"])))
        times.append(_measured(mb.get("measured_s"), w, "measured_s", optional=True))
    its = Iteration(step, measured, tuple(mbs_l), tuple(times) if any(t is not None for t in times) else ())
    if its.tokens == 0:
        raise LogError(f"{where}: iteration {step} has no documents; expected at least one")
    return its


def _group(g: Any, pool: int, where: str) -> Group:
    if not isinstance(g, dict):
        raise _fail(where, "group", g, "an object with ranks, docs and engine")
    ranks, docs = g.get("ranks"), g.get("docs")
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) and 0 <= r < pool for r in ranks):
        raise _fail(where, "ranks", ranks, f"a non-empty list of pool ranks 0..{pool - 1} (pool = dp x cp)")
    if not isinstance(docs, list) or not docs:
        raise _fail(where, "docs", docs, "a non-empty list of document lengths (tokens)")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in docs):
        bad = next(x for x in docs if not (isinstance(x, int) and not isinstance(x, bool) and x >= 1))
        raise _fail(where, "docs", bad, "document lengths that are integers ≥ 1")
    engine = g.get("engine", "ring")
    if not isinstance(engine, str):
        raise _fail(where, "engine", engine, "ring, ulysses or hybrid(u,r)")
    return Group(tuple(ranks), tuple(docs), engine)


def _from_plan(plan: Any, lengths: Any, pool: int, where: str) -> tuple[tuple[Group, ...], ...]:
    """A plan JSON (``dcpsim simulate --plan-out``) with its sequences' lengths, as microbatches of groups."""
    if not isinstance(plan, dict) or not isinstance(plan.get("microbatches"), list):
        raise _fail(where, "plan", type(plan).__name__, "a plan object as 'dcpsim simulate --plan-out' writes")
    if not isinstance(lengths, dict) or not lengths:
        raise _fail(where, "lengths", lengths, 'an object {"seq_id": tokens} for every sequence of the plan')
    if plan.get("pool_size") != pool:
        raise _fail(where, "plan.pool_size", plan.get("pool_size"), f"the job's dp x cp = {pool}")
    out = []
    for k, mb in enumerate(plan["microbatches"]):
        groups = []
        for j, g in enumerate(mb.get("groups", []) if isinstance(mb, dict) else []):
            w = f"{where}: plan microbatch {k}, group {j}"
            ids = g.get("seq_ids", []) if isinstance(g, dict) else []
            missing = [s for s in ids if str(s) not in lengths]
            if missing:
                raise _fail(w, "lengths", f"no entry for seq_id {missing[0]}", "a length for every seq_id")
            groups.append(_group({"ranks": g.get("ranks"), "docs": [lengths[str(s)] for s in ids],
                                  "engine": g.get("engine", "ring")}, pool, w))
        if not groups:
            raise LogError(f"{where}: plan microbatch {k} has no groups; expected at least one")
        out.append(tuple(groups))
    if not out:
        raise LogError(f"{where}: the plan has no microbatches; expected at least one")
    return tuple(out)
