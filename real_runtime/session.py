"""One run's worker side: what every process executes, and the files rank 0 writes.

A *session* is a JSON-able dict: the :class:`~real_runtime.runner.TrainConfig`, the workloads (one per
policy, each a plan per iteration), the device and the output directory. :func:`session_worker` runs on every
process of the world (spawned or under torchrun): it creates the :class:`GroupPool` once for the plans of all
workloads, trains every workload in turn (each from the same initial weights), gathers losses and timeline
rows to rank 0, and rank 0 writes:

* ``losses.csv``: workload, iteration, loss;
* ``timeline.csv``: :data:`TIMELINE_COLUMNS`: :data:`RUN_KEYS` (workload, iteration), then the simulator's
  timeline columns (:data:`dcpsim.sim.timeline.COLUMNS`); every iteration's rows are first built into a
  :class:`~dcpsim.sim.timeline.Timeline` and checked against its schema;
* ``pool.json``: the world size, the process groups created (in creation order) and the CP groups.

:func:`measured_timelines` reads the file back as one Timeline per (workload, iteration), the input of
``sim.metrics.compute_metrics`` and of ``real_runtime.compare``.

Workers import neither pandas nor anything outside ``real_runtime``, ``policies``, ``cost_models``, ``traces``
(the batch type) and ``sim.timeline`` (the schema), so a spawned process starts as fast as torch allows.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcpsim.real_runtime.launch import local_device
from dcpsim.real_runtime.runner import TrainConfig, train
from dcpsim.real_runtime.workload import Workload
from dcpsim.sim.timeline import COLUMNS, Timeline

if TYPE_CHECKING:
    import pandas as pd

RUN_KEYS = ("workload", "iteration")  # which run and iteration a measured row belongs to
TIMELINE_COLUMNS = RUN_KEYS + COLUMNS  # the columns of timeline.csv


def session_dict(workloads: Sequence[Workload], cfg: TrainConfig, device: str, out: str | Path,
                 aligned: bool = False) -> dict[str, Any]:
    """The session every process receives; ``aligned`` adds every aligned power-of-two group to the pool."""
    return {"config": cfg.to_dict(), "workloads": [w.to_dict() for w in workloads], "device": device,
            "out": str(out), "aligned": aligned}


def session_worker(rank: int, world: int, session: dict[str, Any]) -> None:
    """One process of a run (collective): create the pool, train every workload, gather to rank 0."""
    import torch.distributed as dist

    from dcpsim.real_runtime.group_pool import GroupPool

    cfg = TrainConfig(**session["config"])
    workloads = [Workload.from_dict(w) for w in session["workloads"]]
    device = local_device(session["device"], int(session.get("local_rank", rank)))
    pool = GroupPool.for_plans([p for w in workloads for p in w.plans], aligned=bool(session.get("aligned")),
                               world=world, rank=rank)
    mine = {w.label: asdict(train(w, cfg, pool, device)) for w in workloads}
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank == 0:
        assert gathered is not None
        write_outputs(Path(session["out"]), workloads, gathered, pool)


def write_outputs(out: Path, workloads: Sequence[Workload], gathered: Sequence[dict[str, Any]], pool: Any) -> None:
    """Rank 0: write losses.csv, timeline.csv and pool.json from every rank's results, after checking that
    every iteration's rows make a :class:`~dcpsim.sim.timeline.Timeline` (nothing is written otherwise)."""
    rows = [r for res in gathered for wl in workloads for r in res[wl.label]["rows"]]
    order = {wl.label: i for i, wl in enumerate(workloads)}
    rows.sort(key=lambda r: (order[r["workload"]], r["iteration"], r["rank"], r["start"]))
    for (label, it), recs in _by_iteration(rows).items():
        Timeline.from_records(recs, 1, pool.world, source=f"measured timeline of {label!r}, iteration {it}")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "losses.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["workload", "iteration", "loss"])
        for wl in workloads:
            for i, v in enumerate(gathered[0][wl.label]["losses"]):
                w.writerow([wl.label, i, repr(float(v))])
    with open(out / "timeline.csv", "w", newline="") as f:
        dw = csv.DictWriter(f, fieldnames=list(TIMELINE_COLUMNS), lineterminator="\n")
        dw.writeheader()
        dw.writerows(rows)
    info = {"world": pool.world, "process_groups": [list(s) for s in pool.created],
            "cp_groups": [{"ranks": list(k.ranks), "ulysses": k.ulysses} for k in pool.keys]}
    (out / "pool.json").write_text(json.dumps(info, indent=1))


def _by_iteration(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    out: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault((str(r["workload"]), int(r["iteration"])), []).append(r)
    return out


def measured_timelines(frame: pd.DataFrame, world: int) -> dict[tuple[str, int], Timeline]:
    """One checked :class:`~dcpsim.sim.timeline.Timeline` per (workload, iteration) of a run's
    ``timeline.csv`` (read with ``keep_default_na=False``), in the file's order. PP = 1: one stage, a pool of
    ``world`` ranks."""
    missing = [c for c in RUN_KEYS if c not in frame]
    if missing:
        raise ValueError(f"measured timeline lacks column(s) {missing}; timeline.csv has "
                         f"{', '.join(TIMELINE_COLUMNS)}")
    out: dict[tuple[str, int], Timeline] = {}
    for (label, it), part in frame.groupby(list(RUN_KEYS), sort=False):
        out[(str(label), int(it))] = Timeline.from_frame(
            part, 1, world, source=f"measured timeline of {label!r}, iteration {int(it)}")
    return out
