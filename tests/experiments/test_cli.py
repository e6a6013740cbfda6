"""End-to-end CLI behaviour: defaults, JSON schema and determinism, clear errors for bad input."""

import json

import pytest

from dcpsim.experiments.cli import main

SMALL = ["--global-batch-tokens", "1048576", "--no-progress"]
KEYS = {"policy": str, "iteration_time_s": float, "tokens_per_s": float, "tokens_per_s_per_gpu": float,
        "mfu": float, "pipeline_bubble": float, "dp_bubble": float, "microbatch_skew_max": float,
        "scheduling_time_s": float, "peak_memory_gib": float}


def run_json(capsys, *args):
    assert main(["compare", "--json", *SMALL, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_json_schema_and_ratios(capsys):
    out = run_json(capsys, "--policies", "static-cp,static-cp:cp_degree=16")
    assert out["scenario"]["model"] == "llama3-8b" and out["scenario"]["num_gpus"] == 64
    assert [r["policy"] for r in out["results"]] == ["static-cp", "static-cp:cp_degree=16"]
    for r in out["results"]:
        for k, t in KEYS.items():
            assert isinstance(r[k], t), k
        assert 0 <= r["pipeline_bubble"] < 1 and 0 <= r["dp_bubble"] < 1 and 0 < r["mfu"] < 1
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s"] / 64)


def test_same_scenario_and_seed_give_identical_json(capsys):
    assert main(["compare", "--json", *SMALL, "--seed", "7"]) == 0
    a = capsys.readouterr().out
    assert main(["compare", "--json", *SMALL, "--seed", "7"]) == 0
    b = capsys.readouterr().out
    assert a == b
    assert main(["compare", "--json", *SMALL, "--seed", "8"]) == 0
    assert capsys.readouterr().out != a


def test_compare_table_has_ratio_to_first(capsys):
    """'x first' is each policy's throughput over the first's: 1.00x on the first row, the inverse ratio of
    iteration times on the next."""
    assert main(["compare", *SMALL, "--policies", "static-cp,hydra"]) == 0
    out = capsys.readouterr().out
    assert "x first" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("static-cp ", "hydra "))}
    assert rows["static-cp"][3] == "1.00x"
    assert rows["hydra"][3] == f"{float(rows['static-cp'][1]) / float(rows['hydra'][1]):.2f}x"


def test_simulate_writes_plan_and_timeline(tmp_path, capsys):
    plan, tl = tmp_path / "plan.json", tmp_path / "tl.csv"
    assert main(["simulate", "--policy", "static-cp", *SMALL, "--plan-out", str(plan),
                 "--timeline-out", str(tl)]) == 0
    assert "pipeline_bubble" in capsys.readouterr().out
    from dcpsim.policies import Plan
    assert Plan.from_json(plan.read_text()).num_microbatches >= 1
    assert tl.read_text().startswith("stage,rank,microbatch,phase,kind,comm,start,end,tokens")


@pytest.mark.parametrize("content,needle", [
    ("", "empty"),
    ("len\n5\n", "length"),
    ("length\n12\n-3\n", "-3"),
    ("length\n12\n0\n", "0"),
    ("length\n1.5\n", "1.5"),
])
def test_malformed_trace_is_one_clear_line(tmp_path, capsys, content, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    assert main(["simulate", "--policy", "static-cp", "--trace", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "bad.csv" in err and needle in err


def test_impossible_job_says_so(capsys):
    # one rank's budget of 1,000 tokens: a 256K window cannot fit even on the whole pool of 16
    assert main(["simulate", "--policy", "static-cp", *SMALL, "--max-seqlen-per-rank", "1000"]) == 2
    err = capsys.readouterr().err
    assert "does not fit even on the whole pool" in err and err.count("\n") == 1


@pytest.mark.parametrize("args,needle", [
    (["--policies", "nope"], "unknown policy 'nope'"),
    (["--gpu", "z100"], "unknown GPU preset 'z100'"),
    (["--trace", "no-such-preset"], "no-such-preset"),
    (["--pp", "3"], "job.pp = 3"),
    (["--scenario", "nope"], "unknown scenario 'nope'"),
])
def test_bad_options_are_one_line(capsys, args, needle):
    assert main(["compare", *SMALL, *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_help_explains_options(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    for opt in ("--policies", "--trace", "--iterations", "--seed", "--json"):
        assert opt in out


def test_trace_file_with_steps_defines_the_batches(tmp_path, capsys):
    f = tmp_path / "steps.csv"
    f.write_text("length,step\n" + "".join(f"{1000 + i},{i // 4}\n" for i in range(12)))
    assert main(["compare", "--json", "--no-progress", "--policies", "static-cp", "--trace", str(f),
                 "--iterations", "5", "--global-batch-tokens", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    # three steps of four documents each, whatever the token budget says
    r = out["results"][0]
    assert r["tokens_per_s"] * r["iteration_time_s"] == pytest.approx((sum(range(1000, 1012))) / 3, rel=1e-6)


def test_skew_prints_the_equal_tokens_ratio_and_writes_a_png(tmp_path, capsys):
    png = tmp_path / "skew.png"
    assert main(["skew", "--policies", "static-cp,mcore-dcp", *SMALL, "-o", str(png), "--per-microbatch"]) == 0
    out = capsys.readouterr().out
    assert out.count("largest time ratio at tokens within ±10%") == 2
    assert "tokens min" in out and png.stat().st_size > 10_000
