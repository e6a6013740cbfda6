"""A corpus of malformed policy options, command-line values and scenario-file values.

Each goes through the real command line (``dcpsim.experiments.cli.main``) and must end the same way: a non-zero
exit, exactly one line on stderr that names what was wrong (the option or field, the value) and what is valid,
and no traceback.
"""

from __future__ import annotations

import pytest

from dcpsim.experiments.cli import main

SMALL = ["--global-batch-tokens", "1048576", "--no-progress"]

# (arguments after 'dcpsim', text the one error line must contain)
CLI_CASES = [
    (["compare", "--policies", "static-cp:cp_degree=abc"],
     "policy 'static-cp': option cp_degree = 'abc' is invalid: expected an integer ≥ 1, or None"),
    (["compare", "--policies", "hydra:tolerance=abc"],
     "policy 'hydra': option tolerance = 'abc' is invalid: expected a number ≥ 0 and ≤ 10"),
    (["compare", "--policies", "hydra:num_microbatches=2.5"],
     "option num_microbatches = '2.5' is invalid: expected an integer ≥ 1, or None"),
    (["compare", "--policies", "hydra:tolerance=11"], "option tolerance = '11' is invalid"),
    (["compare", "--policies", "hydra:tolerance=nan"], "option tolerance = 'nan' is invalid"),
    (["compare", "--policies", "hydra:degrees=odd"], "option degrees = 'odd' is invalid: expected one of pow2, any"),
    (["compare", "--policies", "static-cp:cp_engine=torus"],
     "option cp_engine = 'torus' is invalid: expected one of ring, ulysses, hybrid, auto"),
    (["compare", "--policies", "mcore-dcp:min_cp_size=0"],
     "option min_cp_size = '0' is invalid: expected an integer ≥ 1"),
    (["compare", "--policies", "mcore-dcp-legacy:min_cp_size=2"], "min_cp_size = 2 is invalid: the legacy scheduler"),
    (["compare", "--policies", "hydra:colour=red"], "policy 'hydra' has no option 'colour'; valid: cp_engine"),
    (["compare", "--policies", "hydra:tolerance"], "policy option 'tolerance' in 'hydra:tolerance' must be key=value"),
    (["compare", "--policies", "static-cp,nope"], "unknown policy 'nope'; valid: "),
    (["simulate", "--policy", "hydra:num_microbatches=0"], "option num_microbatches = '0' is invalid"),
    (["compare", "--iterations", "0"], "argument --iterations: '0' is invalid: expected an integer ≥ 1"),
    (["compare", "--pool", "many"], "argument --pool: 'many' is invalid: expected an integer ≥ 1"),
    (["compare", "--seed", "abc"], "argument --seed: 'abc' is invalid: expected an integer ≥ 0"),
    (["compare", "--seed", "-1"], "argument --seed: '-1' is invalid: expected an integer ≥ 0"),
    (["compare", "--tp-comm-overlap", "1.5"],
     "argument --tp-comm-overlap: '1.5' is invalid: expected a number ≥ 0 and ≤ 1"),
    (["compare", "--cp-engine", "torus"], "argument --cp-engine: invalid choice: 'torus'"),
    (["compare", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    # stragglers (cost_models.stragglers); the default job is pool 16 x pp 4 x tp 1 = 64 GPUs
    (["compare", "--slow-ranks", "16=1.3"],
     "slow_ranks: pool rank 16 is out of range: the pool has W = 16 ranks (0 .. 15)"),
    (["compare", "--slow-ranks", "3=0.9"], "slow_ranks: '3=0.9': factor '0.9' is invalid: a slow-down factor ≥ 1"),
    (["compare", "--slow-ranks", "s4r1=2"],
     "slow_ranks: stage 4 is out of range: the job has 4 pipeline stages (0 .. 3)"),
    (["compare", "--slow-ranks", "gpu64=2"], "slow_ranks: gpu64 is out of range: the job has 64 GPUs (gpu0 .. gpu63)"),
    (["compare", "--slow-ranks", "rank3=2"],
     "slow_ranks: 'rank3=2' is invalid: items are W=F (pool rank W at every stage)"),
    (["compare", "--stragglers", "fraction=2"],
     "stragglers: fraction = 2.0 is invalid: a fraction of the ranks in [0, 1]"),
    (["compare", "--stragglers", "frac=0.1"], "stragglers: 'frac=0.1' is invalid: keys are fraction, slowdown, seed"),
    (["compare", "--stragglers", "slowdown=fixed:2"], "stragglers: 'slowdown=fixed:2' has no fraction"),
    (["compare", "--stragglers", "fraction=0.1,slowdown=lognormal:0.5:1"],
     "stragglers: slowdown = 'lognormal:0.5:1' is invalid: one of fixed:F, uniform:A:B, lognormal:M:S"),
    (["validate", "--nproc", "0"], "argument --nproc: '0' is invalid: expected an integer ≥ 1"),
    (["validate", "--timeout", "soon"], "argument --timeout: 'soon' is invalid: expected a number > 0"),
    (["validate", "--sigma", "-1"], "argument --sigma: '-1' is invalid: expected a number ≥ 0"),
    (["run-real", "--nproc", "0"], "argument --nproc: '0' is invalid: expected an integer ≥ 1"),
    (["run-real", "--lr", "-1"], "argument --lr: '-1' is invalid: expected a number > 0"),
]

# (scenario TOML, text the one error line must contain after the file's name)
SCENARIO_CASES = [
    ('max_tokens_per_rank = "abc"\n', "max_tokens_per_rank = 'abc' is invalid: expected an integer ≥ 1, or None"),
    ("pool = 2.5\n", "pool = 2.5 is invalid: expected an integer ≥ 1"),
    ("iterations = 0\n", "iterations = 0 is invalid: expected an integer ≥ 1"),
    ("seed = -3\n", "seed = -3 is invalid: expected an integer ≥ 0"),
    ('memory_reserve_gb = "lots"\n', "memory_reserve_gb = 'lots' is invalid: expected a number ≥ 0"),
    ("calibration = 3\n", "calibration = 3 is invalid: expected a string, or None"),
    ('moe_recompute = "yes"\n', "moe_recompute = 'yes' is invalid: expected true or false"),
    ("tp_comm_overlap = 2\n", "tp_comm_overlap = 2 is invalid: expected a number ≥ 0 and ≤ 1"),
    ('policies = "hydra"\n', "'policies' must be a list of policy names"),
    ('policies = ["hydra:tolerance=abc"]\n', "policies: policy 'hydra': option tolerance = 'abc' is invalid"),
    # named with the first policy that takes the option (hydra and others do)
    ('[policy_options]\ntolerance = "high"\n', "option tolerance = 'high' is invalid: expected a number ≥ 0"),
    ("[policy_options]\nbogus = 1\n", "[policy_options] no policy has an option 'bogus'"),
    ('slow_ranks = "3=abc"\n', "slow_ranks: '3=abc': factor 'abc' is invalid: a slow-down factor ≥ 1"),
    ('stragglers = "fraction=0.1,slowdown=uniform:2:1"\n', "stragglers: slowdown = 'uniform:2:1' is invalid"),
    ("slow_ranks = 3\n", "slow_ranks = 3 is invalid: expected a string"),
    ("colour = 1\n", "unknown key 'colour'; valid keys: "),
    ("pool = [\n", "not valid TOML"),
]


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's exit for a value its type rejects
        return int(e.code or 0)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    return lines[0]


def test_the_corpus_is_the_size_the_issue_asks_for():
    assert len(CLI_CASES) + len(SCENARIO_CASES) >= 15


@pytest.mark.parametrize("argv,needle", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_bad_command_line_value_is_one_line(capsys, argv, needle):
    rc = run_cli([*argv, *SMALL] if argv[0] in ("compare", "simulate") else argv)
    line = one_error_line(capsys)
    assert rc == 2
    assert line.startswith((f"dcpsim {argv[0]}: error: ", "dcpsim: error: ")), line
    assert needle in line


@pytest.mark.parametrize("text,needle", SCENARIO_CASES, ids=[t.strip() for t, _ in SCENARIO_CASES])
def test_bad_scenario_value_is_one_line_naming_the_file(tmp_path, capsys, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    rc = run_cli(["compare", "--scenario", str(path), *SMALL])
    line = one_error_line(capsys)
    assert rc == 2
    assert line.startswith(f"dcpsim compare: error: {path}") and needle in line, line


def test_a_valid_option_of_each_kind_still_runs(capsys):
    """The checks reject only what is invalid: typed values in range run (and keep their label)."""
    specs = "static-cp:cp_degree=16,hydra:tolerance=0.1:num_microbatches=none:degrees=any"
    assert run_cli(["compare", "--policies", specs, "--json", *SMALL]) == 0
    import json

    labels = [r["policy"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert labels == ["static-cp:cp_degree=16", "hydra:tolerance=0.1:num_microbatches=None:degrees=any"]
