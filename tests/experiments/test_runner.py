"""The library functions behind ``dcpsim compare`` and ``dcpsim simulate`` give what the commands print."""

import json

from dcpsim.experiments.cli import main
from dcpsim.experiments.runner import compare_policies, simulate_policy
from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO


def _plain(x):
    return json.loads(json.dumps(x, sort_keys=True))


def test_compare_policies_is_what_compare_prints(capsys):
    warned: list[str] = []
    made: list[tuple[str, int]] = []

    def bars(label, n):
        made.append((label, n))
        return lambda done: None

    result = compare_policies(DEFAULT_SCENARIO, "static-cp,hydra:degrees=auto", bars=bars, warn=warned.append)
    assert result.scenario.policies == ("static-cp", "hydra:degrees=auto") and result.batches == 1
    assert made == [("static-cp", 1), ("hydra:degrees=auto", 1)] and warned == []
    assert main(["compare", "--json", "--policies", "static-cp,hydra:degrees=auto"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["scenario"] == _plain(result.scenario.to_dict())
    assert printed["results"] == _plain([s.without_timings().to_dict() for s in result.summaries])
    # no policies given: the scenario's own
    alone = compare_policies(DEFAULT_SCENARIO.with_(policies=("static-cp",)))
    assert alone.scenario.policies == ("static-cp",)


def test_simulate_policy_is_what_simulate_prints(capsys):
    sc, run = simulate_policy(DEFAULT_SCENARIO, "mcore-dcp")
    assert sc.policies == ("mcore-dcp",) and run.spec.label == "mcore-dcp" and len(run.iterations) == 1
    assert main(["simulate", "--json", "--policy", "mcore-dcp"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == _plain({"scenario": sc.to_dict(), "results": [run.summary(timings=False).to_dict()]})
