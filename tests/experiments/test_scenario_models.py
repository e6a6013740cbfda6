"""Scenario files with model files, expert parallelism, distributions and batches by sequence count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario.files import load_scenario

MIXTRAL = Path(__file__).parent.parent / "data" / "models" / "Mixtral-8x7B-v0.1" / "config.json"


def test_model_path_relative_to_the_scenario_file(tmp_path):
    (tmp_path / "models").mkdir()
    shutil.copy(MIXTRAL, tmp_path / "models" / "config.json")
    f = tmp_path / "moe.toml"
    f.write_text('model = "models/config.json"\ngpu = "h200"\ntp = 1\npp = 2\npool = 16\nep = 8\n'
                 'context_len = 32768\nglobal_batch_seqs = 24\n'
                 'trace = "lognormal:median=4K,sigma=1,max=32K"\n')
    sc = load_scenario(str(f))
    job = sc.job()
    assert job.model.experts == 8 and job.ep == 8
    assert job.model.params_total == pytest.approx(46.7e9, rel=0.01)
    (batch,) = sc.batches()
    assert batch.num_seqs == 24 and batch.lengths.max() <= 32768
    assert sc.to_dict()["ep"] == 8 and json.dumps(sc.to_dict())


def test_bool_and_int_fields_are_type_checked(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('moe_recompute = "yes"\n')
    with pytest.raises(ScenarioError, match="moe_recompute = 'yes' is invalid: expected true or false"):
        load_scenario(str(f))
    f.write_text('ep = "8"\n')
    with pytest.raises(ScenarioError, match="ep = '8' is invalid"):
        load_scenario(str(f))


def test_a_sweep_point_hashes_the_model_file_it_names(tmp_path, monkeypatch):
    from dcpsim.experiments.sweep.keys import file_digest, point_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    shutil.copy(MIXTRAL, tmp_path / "m" / "config.json")
    digest = file_digest(tmp_path / "m" / "config.json")
    assert point_files({"model": "m/config.json"}) == {"model": digest}
    assert point_files({"model": "m"}) == {"model": digest}  # a model folder: its config.json
    assert point_files({"model": "qwen3-30b-a3b"}) == {}  # a preset is code
