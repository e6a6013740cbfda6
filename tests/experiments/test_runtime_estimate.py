"""Long runs say so: the run-time estimate, the one-line warning before a long compare/simulate/figures run, and
the progress lines of a long compare; none of it for the default scenario."""

from __future__ import annotations

import math

import pytest

import dcpsim.experiments.runner as runner
import dcpsim.experiments.runtime_estimate as est
from dcpsim.experiments.cli import main
from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO


class Stop(Exception):
    """Raised by a stubbed run_policy: the test only needs what was said before the work began."""


def _stop(*_a, **_k):
    raise Stop


def test_estimate_follows_the_measured_table():
    for policy, points in est.MEASURED.items():
        for n, s in points:   # at a measured size: the measured time
            assert est.policy_seconds(policy, n) == pytest.approx(s, rel=1e-12)
        (n1, s1), (n2, s2) = points[-2], points[-1]   # past the largest: the last segment's slope
        slope = math.log(s2 / s1) / math.log(n2 / n1)
        assert est.policy_seconds(policy, 2 * n2) == pytest.approx(s2 * 2**slope, rel=1e-12)
        sizes = [100, 1000, 3000, 10000, 50000, 262144]
        times = [est.policy_seconds(policy, n) for n in sizes]
        assert times == sorted(times), policy   # more sequences never take less
    assert est.policy_seconds("mcore-dcp:cp_engine=hybrid", 8000) == est.policy_seconds("mcore-dcp", 8000)
    assert est.policy_seconds("my-plugin", 8000) == est.policy_seconds(est.DEFAULT_POLICY, 8000)
    assert est.run_seconds([8000, 8000], ["hydra", "static-cp"]) == pytest.approx(
        2 * (est.policy_seconds("hydra", 8000) + est.policy_seconds("static-cp", 8000)))


def test_no_warning_for_the_shipped_scenarios_policies_and_the_literatures():
    from dcpsim.experiments.figures.common import LITERATURE_POLICIES
    from dcpsim.experiments.scenario.files import load_scenario, scenario_names

    for name in scenario_names():   # what dcpsim figures runs (g adds the literature's policies) never warns
        sc = load_scenario(name)
        sizes = [len(b.lengths) for b in sc.batches()]
        for policy in (*sc.policies, *LITERATURE_POLICIES):
            assert est.long_run_warning(sizes, [policy]) is None, (name, policy, sizes)


def test_no_warning_for_the_default_scenario_a_warning_for_many_sequences():
    sizes = [len(b.lengths) for b in DEFAULT_SCENARIO.batches()]
    assert est.long_run_warning(sizes, list(DEFAULT_SCENARIO.policies)) is None
    message = est.long_run_warning([200_000], ["static-cp", "mcore-dcp", "hydra"])
    assert message is not None and "\n" not in message
    assert message.startswith("warning: 1 batch(es) of 200,000 sequences x 3 policies: this run may take about ")
    assert est.duration(30) == "about 30 s" and est.duration(600) == "about 10 min"
    assert est.duration(4 * 3600) == "about 4 h" and est.duration(1e9) == "more than a day"


@pytest.mark.parametrize("args", [["compare", "--context-len", "32"], ["compare", "--global-batch-seqs", "200000"],
                                  ["compare", "--policies", "distca", "--global-batch-seqs", "100000"],
                                  ["simulate", "--policy", "mcore-dcp", "--global-batch-seqs", "200000"]])
def test_a_long_run_is_announced_before_it_starts(args, monkeypatch, capsys):
    monkeypatch.setattr(runner, "run_policy", _stop)
    with pytest.raises(Stop):
        main(args)
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "may take" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: 1 batch(es) of "), err


@pytest.mark.parametrize("args", [["compare"], ["simulate", "--policy", "hydra"]])
def test_the_default_scenario_runs_without_the_warning(args, capsys):
    assert main([*args, "--no-progress"]) == 0
    assert "may take" not in capsys.readouterr().err


def test_a_long_compare_reports_progress_with_the_estimate_of_the_rest(monkeypatch, capsys):
    monkeypatch.setattr(est, "LONG_RUN_S", 0.0)   # a small run stands in for a long one
    args = ["compare", "--policies", "static-cp,mcore-dcp,hydra", "--global-batch-tokens", "1048576",
            "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert len([line for line in err if "may take" in line]) == 1
    progress = [line for line in err if " done (" in line]
    assert len(progress) == 2
    assert progress[0].startswith("static-cp done (about ") and progress[0].endswith(
        "left for mcore-dcp, hydra (estimate)")
    assert progress[1].startswith("mcore-dcp done (") and progress[1].endswith("left for hydra (estimate)")


def test_figures_log_a_long_point(tmp_path, monkeypatch):
    import io

    import dcpsim.experiments.figures.common as common

    monkeypatch.setattr(common, "run_policy", _stop)
    log = io.StringIO()
    ctx = common.FigureContext(tmp_path, stream=log)
    sc = DEFAULT_SCENARIO.with_(global_batch_seqs=200_000)
    assert ctx.try_run(sc, runner.parse_policy_specs("mcore-dcp")[0]) is None   # the stub's failure: a gap
    lines = log.getvalue().splitlines()
    assert any("warning: 1 batch(es) of 200,000 sequences x 1 policy: default mcore-dcp may take" in x
               for x in lines), lines
    quiet = io.StringIO()
    common.FigureContext(tmp_path, stream=quiet).try_run(DEFAULT_SCENARIO, runner.parse_policy_specs("hydra")[0])
    assert "may take" not in quiet.getvalue()


def test_a_long_sweep_is_announced_before_it_starts_a_short_one_is_not(tmp_path, monkeypatch, capsys):
    import dcpsim.experiments.sweep.driver as driver
    from tests.experiments.test_sweep import BASE, GRID

    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "grid.toml").write_text(GRID)
    (tmp_path / "long.toml").write_text('base = "default"\npolicies = ["mcore-dcp"]\n[set]\n'
                                        'global_batch_seqs = 200000\n[grid]\npool = [16, 32]\n')
    monkeypatch.setattr(driver, "run_task", _stop)
    with pytest.raises(Stop):
        main(["sweep", str(tmp_path / "long.toml"), "-o", str(tmp_path / "long"), "--workers", "1"])
    warnings = [x for x in capsys.readouterr().err.splitlines() if "may take" in x]
    assert len(warnings) == 1
    assert warnings[0].startswith("dcpsim sweep: warning: 2 task(s) on 1 worker(s), batches of 200,000-200,000 "
                                  "sequences in 2 sampled: this sweep may take about "), warnings
    monkeypatch.undo()
    assert main(["sweep", str(tmp_path / "grid.toml"), "-o", str(tmp_path / "short"), "--workers", "1",
                 "--no-progress"]) == 0
    assert "may take" not in capsys.readouterr().err
