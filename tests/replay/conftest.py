"""Helpers: the shipped measured data and small hand-made run logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MEASURED = Path(__file__).resolve().parents[2] / "cost_models" / "data" / "measured"
DISTCA = MEASURED / "distca"
SMALL_FILE = DISTCA / "d2_vs_base_wlb.64kup4e1_benchmark.20250818_201134.baseline.json"


def job_record(**kw) -> dict:
    job = {"model": "llama3-8b", "layers": 4, "gpu": "h200", "tp": 8, "pp": 1, "dp": 2, "cp": 1, "ep": 1}
    job.update(kw)
    return {"kind": "job", "format": "dcpsim-runlog/1", "dataset": "hand", "job": job}


def iteration(step: int = 0, measured_s: float = 0.5, docs=((4096, 8192), (12288,))) -> dict:
    return {"kind": "iteration", "step": step, "measured_s": measured_s,
            "microbatches": [{"groups": [{"ranks": [r], "docs": list(d), "engine": "ring"}
                                         for r, d in enumerate(docs)]}]}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.fixture
def hand_log(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "run.jsonl", [job_record(), iteration(0, 0.5), iteration(1, 0.6,
                                                                                             ((16384,), (8192, 8192)))])
