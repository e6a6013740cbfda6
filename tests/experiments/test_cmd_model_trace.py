"""dcpsim model, dcpsim trace, the issue's acceptance comparisons on model files, and a corpus of malformed
model and distribution inputs (each one line on stderr, exit status 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcpsim.experiments.cli import main

MODELS = Path(__file__).parent.parent / "data" / "models"  # sources: tests/data/SOURCES.md
QWEN72 = str(MODELS / "Qwen2.5-72B" / "config.json")
QWEN3_MOE = str(MODELS / "Qwen3-30B-A3B" / "config.json")
MIXTRAL = str(MODELS / "Mixtral-8x7B-v0.1" / "config.json")


def test_model_json_reports_counts_and_flops(capsys):
    assert main(["model", MIXTRAL, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["params_total"] == pytest.approx(46.7e9, rel=0.01)
    assert d["params_active"] == pytest.approx(12.9e9, rel=0.01)
    assert d["layers"] == {"dense": 0, "moe": 32}
    per = d["params_per_layer"]
    assert per["expert"] == 3 * 4096 * 14336 and per["router"] == 4096 * 8
    # 2 FLOPs per weight a token uses: attention + router + 2 of the 8 experts.
    assert d["linear_fwd_flops_per_token_layer"] == 2 * (per["attention"] + per["router"] + 2 * per["expert"])
    assert "family mixtral" in d["source"]


def test_model_text_and_list(capsys):
    assert main(["model", "qwen2.5-72b"]) == 0
    out = capsys.readouterr().out
    assert "72,706,203,648" in out and "huggingface.co/Qwen/Qwen2.5-72B" in out
    assert main(["model", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"llama3.1-405b", "qwen2.5-72b", "mixtral-8x7b", "qwen3-30b-a3b"} <= set(names)


def test_trace_statistics_of_a_file_by_hand(tmp_path, capsys):
    f = tmp_path / "lengths.csv"
    f.write_text("length\n1000\n10000\n40000\n200000\n")
    png = tmp_path / "h.png"
    assert main(["trace", str(f), "--json", "--plot", str(png)]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["count"], st["tokens"], st["max"]) == (4, 251000, 200000)
    work = 1000**2 + 10000**2 + 40000**2 + 200000**2
    a8, a32, a128 = st["above"]["8K"], st["above"]["32K"], st["above"]["128K"]
    assert a8["docs"] == 0.75 and a8["tokens"] == pytest.approx(250000 / 251000)
    assert a32["attention_work"] == pytest.approx((40000**2 + 200000**2) / work)
    assert a128 == pytest.approx(
        {"docs": 0.25, "tokens": 200000 / 251000, "attention_work": 200000**2 / work}
    )
    assert png.stat().st_size > 1000
    # --context-len cuts 200,000 into 131,072 + 68,928 as global batches do.
    assert main(["trace", str(f), "--json", "--context-len", "131072"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 5


def test_trace_distribution_is_deterministic_in_the_seed(capsys):
    spec = "lognormal:mean=1024,sigma=1.5,min=128,max=8192"
    outs = []
    for seed in ("3", "3", "4"):
        assert main(["trace", spec, "--count", "5000", "--seed", seed, "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] != outs[2]
    st = json.loads(outs[0])
    assert st["min"] >= 128 and st["max"] == 8192


def _compare(capsys, *args):
    assert main(["compare", "--json", "--no-progress", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_acceptance_dense_72b_config_on_gb200(capsys):
    out = _compare(
        capsys,
        "--model",
        QWEN72,
        "--gpu",
        "gb200",
        "--tp",
        "4",
        "--pp",
        "4",
        "--pool",
        "32",
        "--context-len",
        "131072",
    )
    assert [r["policy"] for r in out["results"]] == ["static-cp", "mcore-dcp", "hydra"]
    for r in out["results"]:  # run_policy validated every plan
        assert r["iteration_time_s"] > 0 and 0 < r["mfu"] < 1 and r["fits_memory"]


def test_acceptance_qwen3_moe_with_ep16_on_h100(capsys):
    out = _compare(
        capsys,
        "--model",
        QWEN3_MOE,
        "--gpu",
        "h100",
        "--tp",
        "1",
        "--pp",
        "1",
        "--pool",
        "16",
        "--ep",
        "16",
        "--context-len",
        "131072",
    )
    assert out["scenario"]["ep"] == 16
    assert [r["policy"] for r in out["results"]] == ["static-cp", "mcore-dcp", "hydra"]
    for r in out["results"]:
        assert r["iteration_time_s"] > 0 and 0 < r["mfu"] < 1 and r["fits_memory"]


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return str(p)


def _cfg(tmp_path: Path, tag: str, **change) -> str:
    cfg = json.loads(Path(MIXTRAL).read_text())
    for k, v in change.items():
        if v is None:
            cfg.pop(k)
        else:
            cfg[k] = v
    return _write(tmp_path, f"{tag}/config.json", json.dumps(cfg))


TOML_OK = "hidden = 256\nffn = 512\nlayers = 2\nheads = 4\nvocab = 100\n"


def _corpus(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(argv, a phrase of the one-line error) for malformed model, job and distribution inputs."""
    return [
        (["model", _cfg(tmp_path, "a", hidden_size=None)], "'hidden_size' is missing"),
        (["model", _cfg(tmp_path, "b", hidden_size=0)], "'hidden_size' = 0"),
        (["model", _cfg(tmp_path, "c", num_hidden_layers=-2)], "'num_hidden_layers' = -2"),
        (["model", _cfg(tmp_path, "d", num_key_value_heads=5)], "must divide model.heads = 32"),
        (["model", _cfg(tmp_path, "e", num_experts_per_tok=9)], "experts_per_token = 9"),
        (["model", _cfg(tmp_path, "f", model_type="bloom")], "model_type = 'bloom' is not supported"),
        (["model", _write(tmp_path, "g/config.json", "{not json")], "not valid JSON"),
        (["model", _write(tmp_path, "bad.toml", "hidden = [\n")], "not valid TOML"),
        (["model", _write(tmp_path, "unknown.toml", TOML_OK + "hiddn = 3\n")], "unknown key 'hiddn'"),
        (
            ["model", _write(tmp_path, "neg.toml", TOML_OK.replace("layers = 2", "layers = -1"))],
            "model.layers = -1",
        ),
        (["model", _write(tmp_path, "mlp.toml", TOML_OK + 'mlp = "relu"\n')], "model.mlp = 'relu'"),
        (["model", _write(tmp_path, "miss.toml", "hidden = 256\n")], "field 'ffn' is missing"),
        (["model", str(tmp_path / "nothere.json")], "nothere.json: file not found; expected an existing model file"),
        (["model", "llama-9000"], "unknown model preset 'llama-9000'"),
        (
            ["compare", "--model", "mixtral-8x7b", "--ep", "16", "--pool", "16"],
            "must divide model.experts = 8",
        ),
        (["compare", "--model", "llama3-8b", "--ep", "2"], "expert parallelism needs a MoE model"),
        (["trace", "lognormal:mean=1024,sigma=1.5,shape=2"], "unknown parameter 'shape'"),
        (["trace", "lognormal:mean=1024,sigma=1,min=9000,max=8192"], "min = 9000 is above max = 8192"),
        (["trace", "weibull:k=2"], "unknown distribution 'weibull'"),
        (["trace", "lognormal:sigma=1"], "exactly one of mean, median, mu"),
        (["compare", "--trace", "lognormal:mean=1024,sigma=x"], "'sigma' = 'x' is not a number"),
        (["compare", "--trace", "mix:0*32k"], "the weights sum to 0"),
    ]


def test_malformed_inputs_are_one_line_without_traceback(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    assert len(corpus) >= 12
    for argv, phrase in corpus:
        assert main([*argv, *(["--no-progress"] if argv[0] == "compare" else [])]) == 2, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, (argv, err)
        assert phrase in lines[0], (argv, lines[0])


def test_cost_of_one_moe_layer_counts_the_active_experts(capsys):
    assert main(["cost", "--model", "mixtral-8x7b", "--seq-len", "8192", "--gpu", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    attn, router, expert = 2 * 4096 * 4096 + 2 * 4096 * 1024, 4096 * 8, 3 * 4096 * 14336
    assert d["flops"]["linear_fwd"] == 8192 * 2 * (attn + router + 2 * expert)


def test_the_trace_example_in_docs_models_md_is_current(capsys):
    doc = (Path(__file__).parent.parent.parent / "docs" / "models.md").read_text()
    assert main(["trace", "256k", "--count", "50000"]) == 0
    out = capsys.readouterr().out
    assert f"$ dcpsim trace 256k --count 50000\n{out}" in doc


def test_a_moe_toml_whose_every_layer_is_dense_counts_as_its_dense_model(tmp_path, capsys):
    """It used to end in StopIteration (no MoE layer to describe); its counts are the dense model's."""
    dense = "hidden = 1024\nffn = 4096\nlayers = 4\nheads = 8\nvocab = 1000\n"
    (tmp_path / "dense.toml").write_text(dense)
    (tmp_path / "moe.toml").write_text(dense + "experts = 8\nexperts_per_token = 2\nexpert_ffn = 512\n"
                                       "dense_layers = [0, 1, 2, 3]\n")
    out = {}
    for name in ("dense", "moe"):
        assert main(["model", str(tmp_path / f"{name}.toml"), "--json"]) == 0
        out[name] = json.loads(capsys.readouterr().out)
    assert out["moe"]["layers"] == {"dense": 4, "moe": 0}
    for key in ("params_active", "linear_fwd_flops_per_token"):
        assert out["moe"][key] == out["dense"][key]
    assert "moe_layer_total" not in out["moe"]["params_per_layer"]
