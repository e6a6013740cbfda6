"""The shipped default H200 calibration, fitted to DistCA's measured steps (cost_models/data/calibration_h200.json,
made by the command in docs/validation.md and build_defaults.py step 6): DistCA's named fitting files through
'dcpsim replay --from distca' with it (no --calibration) —
in-sample per-iteration MAPE ≤ 8 %, |mean error| ≤ 3 %, 5-fold cross-validated MAPE ≤ 10 %, one calibration
for every file (no per-file factor)."""

from __future__ import annotations

import json

from dcpsim.cost_models import Calibration, default_calibration, get_gpu
from dcpsim.experiments.cli import main
from dcpsim.experiments.replay.fit import fit_runs
from dcpsim.experiments.replay.validation import SHIPPED_KNOBS, distca_logs
from tests.replay.conftest import DISTCA, MEASURED

FITTED = MEASURED.parent / "calibration_h200.json"


def test_in_sample(capsys) -> None:
    files = sorted(str(p) for p in DISTCA.glob("*.json"))
    assert len(files) == 6
    assert main(["replay", "--from", "distca", *files, "--json", "--worst", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 212 and out["calibration"] == "h200-distca-steps"
    assert out["mape"] <= 0.08 and abs(out["mean_error"]) <= 0.03
    for ds, s in out["datasets"].items():
        assert s["mape"] <= 0.08 and abs(s["mean_error"]) <= 0.05, ds


def test_five_fold_cross_validation() -> None:
    assert Calibration.load(FITTED) == default_calibration(get_gpu("h200"))
    res = fit_runs(distca_logs(), Calibration.load(FITTED), get_gpu("h200"), knobs=SHIPPED_KNOBS, folds=5, rounds=1)
    assert res.folds == 5 and res.cv["all"].n == 212
    assert res.cv["all"].mape <= 0.10
