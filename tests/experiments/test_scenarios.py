"""The shipped scenario files: they load, describe the documented layouts, build jobs, and run."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.runner import parse_policy_specs, run_policy
from dcpsim.experiments.scenario.files import SCENARIO_DIR, load_scenario, scenario_names
from dcpsim.policies.registry import available_policies

SHIPPED = {  # name → (GPUs, model, TP, PP, pool, context)
    "h100-512-32k": (512, "llama3-8b", 2, 4, 64, 32768),
    "h100-512-256k": (512, "llama3-8b", 2, 4, 64, 262144),
    "prod-2048-256k": (2048, "llama3-70b", 8, 8, 32, 262144),
    "prod-11264-256k": (11264, "llama3-70b", 8, 16, 88, 262144),
}


def test_every_shipped_scenario_is_listed():
    assert set(SHIPPED) <= set(scenario_names())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_scenario_loads_and_builds_a_job(name):
    sc = load_scenario(name)
    gpus, model, tp, pp, pool, ctx = SHIPPED[name]
    assert (sc.num_gpus, sc.model, sc.tp, sc.pp, sc.pool, sc.context_len) == (gpus, model, tp, pp, pool, ctx)
    job = sc.job()
    assert job.num_gpus == gpus
    assert sc.cost_model().max_tokens_per_rank() > 0
    assert sc.description and sc.trace and sc.global_batch_tokens >= ctx
    for spec in parse_policy_specs(",".join(sc.policies)):
        assert spec.name in {"static-cp", "mcore-dcp", "mcore-dcp-legacy", "hydra"}
    text = (SCENARIO_DIR / f"{name}.toml").read_text()
    assert text.startswith("#"), "each scenario file documents its choices in a comment header"


def test_smallest_scenario_runs_with_a_reduced_batch():
    sc = load_scenario("h100-512-32k").with_(global_batch_tokens=1 << 20, pool=16)
    batches = sc.batches()
    cm = sc.cost_model()
    names = [p for p in sc.policies if p in available_policies()]
    assert {"static-cp", "mcore-dcp"} <= set(names)
    for spec in parse_policy_specs(",".join(names)):
        pr = run_policy(spec, batches, cm, sc.policy_options)
        s = pr.summary().metrics
        assert s.tokens_per_s > 0 and 0 <= s.pipeline_bubble <= 1


def test_scenarios_command_lists_them(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        assert name in out


def test_a_relative_calibration_path_resolves_next_to_the_scenario(tmp_path, monkeypatch):
    """Like model, trace and gpu: a scenario in another folder names its calibration relative to itself."""
    import shutil

    from dcpsim.cost_models.calibration import DATA_DIR, Calibration
    from dcpsim.experiments.scenario.files import load_scenario

    folder = tmp_path / "study"
    folder.mkdir()
    shutil.copy(DATA_DIR / "calibration_h200.json", folder / "mine.json")
    (folder / "s.toml").write_text('calibration = "mine.json"\n')
    monkeypatch.chdir(tmp_path)  # mine.json is not in the working directory
    sc = load_scenario("study/s.toml")
    assert sc.calibration is not None and Path(sc.calibration).resolve() == (folder / "mine.json").resolve()
    assert Calibration.load(sc.calibration) == Calibration.load(DATA_DIR / "calibration_h200.json")
