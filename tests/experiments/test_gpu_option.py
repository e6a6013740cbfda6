"""--gpu PRESET|FILE.toml and a scenario's [gpu] table."""

from __future__ import annotations

import argparse

import pytest

from dcpsim.experiments.cli import main
from dcpsim.experiments.cli.args import add_scenario_arguments, scenario_from_args
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario.files import load_scenario

SMALL = ["--global-batch-tokens", "1048576", "--no-progress"]


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_scenario_arguments(p)
    return p.parse_args(list(argv))


def test_gpu_file_on_the_command_line(tmp_path):
    f = tmp_path / "nvl16.toml"
    f.write_text('base = "h200"\nname = "h200-nvl16"\nnvlink_domain = 16\n')
    sc = scenario_from_args(args("--gpu", str(f)))
    gpu = sc.job().gpu
    assert (gpu.name, gpu.nvlink_domain, gpu.hbm_gb) == ("h200-nvl16", 16, 141.0)
    assert scenario_from_args(args("--gpu", "gb200")).job().gpu.nvlink_domain == 72


def test_scenario_gpu_table_and_relative_gpu_file(tmp_path):
    s = tmp_path / "s.toml"
    s.write_text('gpu = { base = "h100", nics_per_node = 4 }\n')
    sc = load_scenario(str(s))
    assert sc.gpu == "h100-custom" and sc.job().gpu.nics_per_node == 4
    # --gpu replaces the table.
    assert scenario_from_args(args("--scenario", str(s), "--gpu", "b200")).job().gpu.name == "b200"
    (tmp_path / "g.toml").write_text('base = "a100"\nname = "a100-x"\n')
    s.write_text('gpu = "g.toml"\n')
    assert load_scenario(str(s)).job().gpu.name == "a100-x"


def test_bad_scenario_gpu_table_names_the_file(tmp_path):
    s = tmp_path / "s.toml"
    s.write_text('[gpu]\nbase = "h100"\nhbm_gb = 0\n')
    with pytest.raises(Exception) as e:
        load_scenario(str(s))
    assert f"{s} [gpu]: gpu.hbm_gb = 0 is invalid: a positive finite number" in str(e.value)
    s.write_text("gpu_spec = 3\n")
    with pytest.raises(ScenarioError, match="'gpu_spec' must be a table"):
        load_scenario(str(s))


def test_bad_gpu_file_is_one_line_from_the_cli(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('base = "h100"\nnvlink_domain = 12\n')
    assert main(["compare", *SMALL, "--gpu", str(f)]) == 2
    err = capsys.readouterr().err
    assert "gpu.nvlink_domain = 12 is invalid" in err and str(f) in err and err.count("\n") == 1
