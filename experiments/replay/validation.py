"""The end-to-end suite of ``dcpsim reproduce --steps``: every shipped measured-step dataset replayed with the
shipped calibration of its GPU (in-sample error), and the k-fold cross-validation of refitting that calibration
to the measured steps (the ``calibrate --runs`` fit, :func:`dcpsim.experiments.replay.fit.fit_runs`).

Per GPU, the datasets measured on it are fitted together (one calibration, no per-dataset factor) on
:data:`SHIPPED_KNOBS`; iteration i of a dataset is in fold i mod k, the fit sees k − 1 folds of every dataset
and the held-out fold is simulated. Every number is computed when asked (nothing is stored), so the table
follows the shipped calibrations and the cost model. docs/validation.md's table and scatter are this output
(``dcpsim reproduce --steps --write-docs docs/validation.md``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dcpsim.cost_models import default_calibration, get_gpu
from dcpsim.experiments.replay.distca import import_distca
from dcpsim.experiments.replay.fit import fit_runs
from dcpsim.experiments.replay.megatron import import_megatron
from dcpsim.experiments.replay.replay import Replayed, replay
from dcpsim.experiments.replay.runlog import LogError, RunLog
from dcpsim.experiments.replay.stats import ErrorStats, error_stats

MEASURED = Path(__file__).resolve().parents[2] / "cost_models" / "data" / "measured"
# What the end-to-end fit moves. Not attention_scale: the attention curves are kernel fits that
# 'dcpsim reproduce' checks against cuDNN's H200 measurements. Not the fixed costs: one microbatch per
# iteration and two layer counts cannot tell them apart from the per-token terms (their fit goes to 0).
SHIPPED_KNOBS = ("gemm_peak_tflops", "nvlink_scale", "network_scale")
ASSUMES = {
    "baseline": "DP rank r packs lists r and r+DP, CP 1, one microbatch; step = fwd+bwd+optimizer, no grad reduction",
    "wlbllm": "WLB-LLM greedy re-balance over DP replicas, per-document CP (CP 1: no cp_size recorded)",
    "megatron": "fixed-length sequences, micro-batch-size per DP rank, global/(micro·DP) microbatches, 1F1B",
}
COLUMNS = ("dataset", "gpu", "calibration", "n", "in-sample MAPE", "CV MAPE", "mean error", "corr",
           "importer assumes")
BEGIN, END = "<!-- steps-table -->", "<!-- /steps-table -->"
SCATTER = "validation_scatter.png"


def distca_logs() -> list[RunLog]:
    return [import_distca(p) for p in sorted((MEASURED / "distca").glob("*.json"))]


def megatron_logs() -> list[RunLog]:
    return [import_megatron(p) for p in sorted((MEASURED / "megatron").glob("*/golden_values_*h100*.json"))]


def shipped_logs() -> list[RunLog]:
    """Every shipped measured-step dataset, imported (the DistCA files by mode, the Megatron-LM golden case)."""
    return distca_logs() + megatron_logs()


@dataclass(frozen=True)
class StepsRow:
    dataset: str  # a dataset name, or "<gpu>: all" for the GPU's datasets together
    gpu: str
    calibration: str
    in_sample: ErrorStats  # replayed with the shipped calibration
    cv: ErrorStats  # held out of the k-fold refit
    assumes: str

    def cells(self) -> list[str]:
        s = self.in_sample
        return [self.dataset, self.gpu, self.calibration, str(s.n), f"{s.mape:.1%}", f"{self.cv.mape:.1%}",
                f"{s.mean_error:+.1%}", f"{s.corr:.2f}", self.assumes]

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "gpu": self.gpu, "calibration": self.calibration,
                "in_sample": self.in_sample.to_dict(), "cv": self.cv.to_dict(), "assumes": self.assumes}


@dataclass(frozen=True)
class StepsTable:
    rows: list[StepsRow]
    folds: int
    replayed: list[tuple[str, Replayed]]  # (dataset, iteration) in row order, for the scatter


def _assumes(log: RunLog) -> str:
    kind = "megatron" if log.dataset.startswith("megatron") else str(log.meta.get("mode"))
    return ASSUMES.get(kind, "as logged")


def steps_table(logs: Sequence[RunLog] | None = None, folds: int = 5) -> StepsTable:
    """One row per dataset of ``logs`` (default: :func:`shipped_logs`) and one per GPU for its datasets
    together: in-sample error with the GPU's shipped calibration, k-fold CV error of refitting it."""
    logs = list(shipped_logs() if logs is None else logs)
    if folds < 2:
        raise LogError(f"--folds = {folds}: cross-validation needs at least 2 folds")
    by_gpu: dict[str, list[RunLog]] = {}
    for log in logs:
        by_gpu.setdefault(str(log.job["gpu"]), []).append(log)
    rows: list[StepsRow] = []
    replayed: list[tuple[str, Replayed]] = []
    for gpu_name, group in by_gpu.items():
        gpu = get_gpu(gpu_name)
        cal = default_calibration(gpu)
        fit = fit_runs(group, cal, gpu, knobs=SHIPPED_KNOBS, folds=folds)
        pooled: list[Replayed] = []
        for log in group:
            rep = replay(log, cal)
            pooled += rep
            replayed += [(log.dataset, r) for r in rep]
            s = error_stats([r.predicted_s for r in rep], [r.measured_s for r in rep])
            rows.append(StepsRow(log.dataset, gpu.name, cal.name, s, fit.cv[log.dataset], _assumes(log)))
        if len(group) > 1:
            s = error_stats([r.predicted_s for r in pooled], [r.measured_s for r in pooled])
            rows.append(StepsRow(f"{gpu.name}: all", gpu.name, cal.name, s, fit.cv["all"],
                                 "one calibration, no per-dataset factor"))
    return StepsTable(rows, folds, replayed)


def markdown(table: StepsTable) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in table.rows:
        cells = r.cells()
        if r.dataset.endswith(": all"):
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(table: StepsTable, doc: str | Path) -> Path:
    """Replace the table between ``BEGIN`` and ``END`` in ``doc`` with :func:`markdown` and write the scatter of
    every iteration beside it (``SCATTER``), both or neither; returns the scatter's path."""
    from dcpsim.experiments.output.write import Outputs
    from dcpsim.experiments.replay.plot import write_scatter

    p = Path(doc)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LogError(f"--write-docs {p}: cannot read it ({e})") from None
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise LogError(f"--write-docs {p}: no {BEGIN} ... {END} block to replace")
    scatter = p.with_name(SCATTER)
    pts = table.replayed
    body = f"{BEGIN}\n{markdown(table)}\n{END}"
    with Outputs({"--write-docs": p, "--write-docs (scatter)": scatter}, images=("--write-docs (scatter)",)) as out:
        with out.writing("--write-docs (scatter)") as tmp:
            write_scatter(str(tmp), pts, error_stats([r.predicted_s for _, r in pts], [r.measured_s for _, r in pts]),
                          log=True)
        out.write_text("--write-docs", pattern.sub(lambda _m: body, text))
    return scatter
