"""The run header's layout (Scenario.layout): what ran, expert layout and interleaving included."""

from __future__ import annotations

from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO
from dcpsim.experiments.scenario.files import load_scenario


def test_layout_names_what_runs():
    assert DEFAULT_SCENARIO.layout() == "TP1 PP4 pool 16"
    assert DEFAULT_SCENARIO.with_(vpp=2, recompute="selective").layout() == "TP1 PP4 VP2 pool 16, recompute selective"
    moe = load_scenario("h100-qwen3-moe-ep8-128k")
    assert moe.layout() == "TP1 PP1 pool 32, EP8 ETP1 alltoall dispatcher"
    assert moe.with_(etp=1, moe_dispatcher="flex").layout() == "TP1 PP1 pool 32, EP8 ETP1 flex dispatcher"
