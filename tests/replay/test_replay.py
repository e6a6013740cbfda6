"""The replay simulates exactly the logged placement; its statistics; plans from 'simulate --plan-out'."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel
from dcpsim.experiments.cli import main
from dcpsim.experiments.replay.replay import job_of, plan_of, replay
from dcpsim.experiments.replay.runlog import read_log
from dcpsim.experiments.replay.stats import error_stats, kfold_indices
from dcpsim.policies.plan import CPGroup, Engine, make_plan
from dcpsim.sim.simulate import simulate_plan
from dcpsim.traces.batching import GlobalBatch
from tests.replay.conftest import SMALL_FILE, iteration, job_record, write_jsonl


def test_replay_is_the_simulation_of_the_logged_plan(hand_log: Path) -> None:
    log = read_log(hand_log)
    rows = replay(log)
    job = job_of(log)
    assert job.model.layers == 4 and job.pool == 2 and job.tp == 8 and job.gpu.name == "h200"
    plan = make_plan("x", 2, [[CPGroup((0,), (0, 1), Engine()), CPGroup((1,), (2,), Engine())]])
    direct = simulate_plan(plan, GlobalBatch.of([4096, 8192, 12288]), AnalyticCostModel(job)).metrics
    assert rows[0].predicted_s == pytest.approx(direct.iteration_time_s, rel=1e-12)
    assert rows[0].error == pytest.approx(direct.iteration_time_s / 0.5 - 1)
    assert rows[1].predicted_s > rows[0].predicted_s  # 32K tokens against 24K


def test_cp_groups_and_engines_are_kept(tmp_path: Path) -> None:
    it = {"kind": "iteration", "step": 3, "measured_s": 1.0, "microbatches": [
        {"groups": [{"ranks": [0, 1, 2, 3], "docs": [65536], "engine": "hybrid(2,2)"}]},
        {"groups": [{"ranks": [0, 1], "docs": [8192], "engine": "ulysses"},
                    {"ranks": [3, 2], "docs": [4096, 4096]}]}]}
    log = read_log(write_jsonl(tmp_path / "cp.jsonl", [job_record(tp=2, dp=2, cp=2), it]))
    plan, batch = plan_of(log.iterations[0], log.pool)
    assert plan.num_microbatches == 2 and plan.pool_size == 4
    g0, g1, g2 = plan.microbatches[0].groups[0], *plan.microbatches[1].groups
    assert (str(g0.engine), g1.engine.kind, g2.ranks) == ("hybrid(2,2)", "ulysses", (3, 2))
    assert batch.lengths.tolist() == [65536, 8192, 4096, 4096]
    assert replay(log)[0].cp_comm_s > 0


def test_error_statistics() -> None:
    s = error_stats([1.1, 0.8, 2.0], [1.0, 1.0, 2.0])
    assert s.n == 3 and s.mape == pytest.approx(0.1) and s.mean_error == pytest.approx(-1 / 30)
    assert s.max_ape == pytest.approx(0.2) and -1 <= s.corr <= 1
    assert np.isnan(error_stats([1.0], [2.0]).corr)
    folds = kfold_indices(7, 3)
    assert [f.tolist() for f in folds] == [[0, 3, 6], [1, 4], [2, 5]]


def test_cli_json_and_plot(tmp_path: Path, capsys) -> None:
    png = tmp_path / "s.png"
    assert main(["replay", "--from", "distca", str(SMALL_FILE), "--json", "--plot", str(png), "--worst", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 20 and len(out["iterations"]) == 20 and len(out["worst"]) == 2
    errs = [r["predicted_s"] / r["measured_s"] - 1 for r in out["iterations"]]
    assert out["mean_error"] == pytest.approx(np.mean(errs)) and out["mape"] == pytest.approx(np.mean(np.abs(errs)))
    terms = out["worst"][0]["terms_s"]
    assert terms["attention"] > 0 and terms["GEMMs"] > 0
    pred = out["iterations"][[r["step"] for r in out["iterations"]].index(out["worst"][0]["step"])]["predicted_s"]
    assert sum(terms.values()) == pytest.approx(pred, rel=1e-9)
    assert png.stat().st_size > 1000


def test_text_report(hand_log: Path, capsys) -> None:
    assert main(["replay", str(hand_log)]) == 0
    out = capsys.readouterr().out
    assert "MAPE" in out and "worst iterations" in out and "attention" in out


def test_plan_out_with_measured_times_is_a_valid_input(tmp_path: Path, capsys) -> None:
    plan_path = tmp_path / "plan.json"
    args = ["--model", "llama3-8b", "--gpu", "h100", "--tp", "8", "--pp", "1", "--pool", "4", "--context-len", "8192",
            "--global-batch-tokens", "32768", "--iterations", "1"]
    assert main(["simulate", "--policy", "static-cp:cp_degree=2", *args, "--plan-out", str(plan_path),
                 "--json", "--no-progress"]) == 0
    simulated = json.loads(capsys.readouterr().out)["results"][0]["iteration_time_s"]
    import argparse

    from dcpsim.experiments.cli.args import add_scenario_arguments, scenario_from_args

    p = argparse.ArgumentParser()
    add_scenario_arguments(p)
    batch = scenario_from_args(p.parse_args(args)).batches()[-1]
    lengths = {str(i): int(n) for i, n in zip(batch.seq_ids, batch.lengths)}
    rec = {"kind": "iteration", "step": 0, "measured_s": 1.0, "plan": json.loads(plan_path.read_text()),
           "lengths": lengths}
    log = write_jsonl(tmp_path / "p.jsonl", [job_record(model="llama3-8b", layers=None, gpu="h100", tp=8, dp=4), rec])
    assert main(["replay", str(log), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iterations"][0]["predicted_s"] == pytest.approx(simulated, rel=1e-9)


def test_single_iteration(tmp_path: Path) -> None:
    log = read_log(write_jsonl(tmp_path / "one.jsonl", [job_record(), iteration()]))
    assert len(replay(log)) == 1


def test_a_step_without_gradient_reduction_leaves_the_reduce_scatter_out(tmp_path: Path) -> None:
    records = [job_record(), iteration()]
    with_sync = replay(read_log(write_jsonl(tmp_path / "a.jsonl", records)))[0]
    records[0]["job"]["grad_sync"] = False
    without = replay(read_log(write_jsonl(tmp_path / "b.jsonl", records)))[0]
    assert with_sync.dp_comm_s > 0  # DP 2 across two 8-GPU nodes: network links, equal RS and AG models
    assert without.predicted_s == pytest.approx(with_sync.predicted_s - with_sync.dp_comm_s / 2, rel=1e-12)
