"""The sweep's store: one JSON record per task in ``points/<key>.json``, written atomically by the driver, and
checked when read back (:func:`record_problem`): a record edited or damaged on disk is run again, never mixed
into the results."""

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


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def record_problem(rec: Any, key: str) -> str | None:
    """Why a stored record cannot be a task's result (one phrase naming the field and value), or None.

    A record holds its ``key`` (its file's name), an ``error`` (None or a string), a ``summary`` (None for
    an error; else every column of ``RunSummary``: ``policy`` a string, ``fits_memory`` a boolean, every
    metric a number or null) and ``elapsed_s`` (a number)."""
    from dcpsim.experiments.runner import RunSummary

    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("key") != key:
        return f"key = {rec.get('key')!r} is not its file's name"
    error, summary = rec.get("error"), rec.get("summary")
    if error is not None and not isinstance(error, str):
        return f"error = {error!r} is not a string"
    if not _number(rec.get("elapsed_s")):
        return f"elapsed_s = {rec.get('elapsed_s')!r} is not a number"
    if summary is None:
        return None if error else "it holds neither a summary nor an error"
    if not isinstance(summary, dict):
        return f"summary = {summary!r} is not an object"
    for col in RunSummary.columns():
        if col not in summary:
            return f"summary.{col} is missing"
        v = summary[col]
        if col == "policy":
            ok, kind = isinstance(v, str), "a string"
        elif col == "fits_memory":
            ok, kind = isinstance(v, bool), "a boolean"
        else:
            ok, kind = v is None or _number(v), "a number"
        if not ok:
            return f"summary.{col} = {v!r} is not {kind}"
    return None


def read_record(out_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored record of ``key``, or None (absent, unreadable or malformed: the task runs again)."""
    rec, _ = load_record(out_dir, key)
    return rec


def load_record(out_dir: Path, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the stored record of ``key``, None) or (None, why it cannot be used; None when there is no file)."""
    path = out_dir / "points" / f"{key}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as e:
        return None, f"unreadable ({e})"
    try:
        rec = json.loads(text)
    except ValueError as e:
        return None, f"not JSON ({e})"
    problem = record_problem(rec, key)
    return (None, problem) if problem else (rec, None)


def stored_status(out_dir: Path, malformed: dict[str, str] | None = None) -> dict[str, bool]:
    """Key → whether its stored record is an error, for every usable record (one in memory at a time); a
    malformed record's key → why it cannot be used goes to ``malformed`` when given."""
    out = {}
    for p in (out_dir / "points").glob("*.json"):
        rec, problem = load_record(out_dir, p.stem)
        if rec is not None:
            out[p.stem] = bool(rec.get("error"))
        elif problem and malformed is not None:
            malformed[p.stem] = problem
    return out
