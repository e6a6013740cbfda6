"""The sweep's store: one JSON record per task in ``points/<key>.json``, written atomically by the driver."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def store(out_dir: Path, record: dict[str, Any]) -> Path:
    """Write a task's record atomically (a partial file never looks finished)."""
    points = out_dir / "points"
    points.mkdir(parents=True, exist_ok=True)
    final = points / f"{record['key']}.json"
    tmp = points / f".{record['key']}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, default=str))
    os.replace(tmp, final)
    return final


def read_record(out_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored record of ``key``, or None (absent or unreadable: the task runs again)."""
    try:
        rec = json.loads((out_dir / "points" / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key else None


def stored_status(out_dir: Path) -> dict[str, bool]:
    """Key → whether its stored record is an error, for every readable record (one in memory at a time)."""
    out = {}
    for p in (out_dir / "points").glob("*.json"):
        rec = read_record(out_dir, p.stem)
        if rec is not None:
            out[p.stem] = bool(rec.get("error"))
    return out
