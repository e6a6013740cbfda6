"""Export a :class:`sim.timeline.Timeline` as a Chrome trace (the JSON that Perfetto and chrome://tracing load).

Mapping (Trace Event Format, "JSON Object Format"):

* one complete event (``"ph": "X"``) per timeline row, ``ts`` and ``dur`` in microseconds;
* ``pid`` = pipeline stage, ``tid`` = pool rank, so each stage is a process and each of its ranks a thread;
* names: ``"F mb3"`` / ``"B mb3"`` (compute of microbatch 3), ``"cp comm"`` (exposed CP communication),
  ``"pp wait"`` (exposed pipeline transfer before an operation), ``"dp wait"`` (idle before the gradient sync),
  ``"grad sync"`` (reduce-scatter + all-gather), ``"tp comm"`` (exposed TP communication), ``"ep comm"``
  (MoE expert-parallel all-to-alls) and ``"optimizer step"``;
* ``cat`` is the row's kind (``compute``, ``comm``, ``idle``); ``args`` hold microbatch, phase and tokens;
* metadata events (``"ph": "M"``) name every process ("stage 2") and thread ("rank 17") and fix their order.

The function is pure: it returns a dict; writing it is the caller's business (:func:`write_chrome_trace`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dcpsim.sim.timeline import Timeline

US_PER_S = 1e6


def _names(tl: Timeline) -> list[str]:
    """The slice name of every timeline row (see the module docstring)."""
    kind, comm, phase, mb = tl["kind"], tl["comm"], tl["phase"], tl["microbatch"]
    out: list[str] = []
    for k, c, ph, m in zip(kind.tolist(), comm.tolist(), phase.tolist(), mb.tolist()):
        if k == "compute":
            out.append(f"{ph} mb{m}" if ph in ("F", "B") else "optimizer step")
        elif k == "idle":
            out.append("dp wait")
        elif c == "cp":
            out.append("cp comm")
        elif c == "pp":
            out.append("pp wait")
        elif c == "dp":
            out.append("grad sync")
        elif c == "tp":
            out.append("tp comm")
        elif c == "ep":
            out.append("ep comm")
        else:
            out.append(f"{k} {c}".strip())
    return out


def timeline_to_chrome(tl: Timeline, *, label: str | None = None,
                       metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Chrome-trace dict of ``tl``: exactly one ``"X"`` event per timeline row, plus name metadata.

    ``label`` (e.g. the policy) prefixes the process names; ``metadata`` goes to the trace's top-level
    ``"metadata"`` object (scenario, policy, metrics), which the viewers show but ignore otherwise.
    """
    ts = np.round(np.asarray(tl["start"], dtype=float) * US_PER_S, 3).tolist()
    dur = np.round(np.maximum(tl.duration, 0.0) * US_PER_S, 3).tolist()
    events: list[dict[str, Any]] = []
    prefix = f"{label} " if label else ""
    for s in range(tl.num_stages):
        events.append({"ph": "M", "name": "process_name", "pid": s, "tid": 0,
                       "args": {"name": f"{prefix}stage {s}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": s, "tid": 0, "args": {"sort_index": s}})
    ranks = sorted(set(zip(tl["stage"].tolist(), tl["rank"].tolist())))
    for s, r in ranks:
        events.append({"ph": "M", "name": "thread_name", "pid": s, "tid": r, "args": {"name": f"rank {r}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": s, "tid": r, "args": {"sort_index": r}})
    for name, kind, st, rk, m, ph, tok, t0, d in zip(
            _names(tl), tl["kind"].tolist(), tl["stage"].tolist(), tl["rank"].tolist(),
            tl["microbatch"].tolist(), tl["phase"].tolist(), np.asarray(tl["tokens"], dtype=float).tolist(),
            ts, dur):
        events.append({"ph": "X", "name": name, "cat": kind, "pid": st, "tid": rk, "ts": t0, "dur": d,
                       "args": {"microbatch": m, "phase": ph, "tokens": round(tok, 1)}})
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if metadata:
        out["metadata"] = metadata
    return out


def chrome_trace_json(tl: Timeline, **kw: Any) -> str:
    """The Chrome trace of ``tl`` as compact JSON text; a non-finite time or metric is refused naming its field
    (:func:`experiments.output.write.dumps_json`)."""
    from dcpsim.experiments.output.write import dumps_json

    return dumps_json(timeline_to_chrome(tl, **kw), "--chrome-trace", separators=(",", ":"))


def write_chrome_trace(path: str | Path, tl: Timeline, **kw: Any) -> int:
    """Write the Chrome trace of ``tl`` to ``path`` (atomically); return the number of slices ("X" events)."""
    from dcpsim.experiments.output.write import write_text

    write_text(path, chrome_trace_json(tl, **kw), "--chrome-trace")
    return len(tl)
