"""A new user's tries of the issue's classes, re-run by hand (2026-12-02) and kept here: each one line, exit 2.

Values out of range on the command line, files that are not what their name says, a folder without a model in
it; the output-path rows of the same check are in cases_outputs.py (figures and sweep directories)."""

from __future__ import annotations

from tests.adversarial.corpus import DIRECTORY, Case

SMALL = ("--global-batch-tokens", "1048576", "--no-progress")

CASES = [
    Case("new-policies-empty", ("compare", "--policies", "", *SMALL),
         "no policy given; e.g. --policies static-cp,mcore-dcp,hydra"),
    Case("new-policies-twice", ("compare", "--policies", "hydra,static-cp,hydra", *SMALL),
         "policy 'hydra' is given twice in 'hydra,static-cp,hydra'; name each policy (with its options) once"),
    Case("new-slow-rank-infinite", ("compare", "--slow-ranks", "s0r0=inf", *SMALL),
         "slow_ranks: 's0r0=inf': factor 'inf' is invalid: a slow-down factor ≥ 1"),
    Case("new-max-seqlen-per-rank-zero", ("compare", "--max-seqlen-per-rank", "0", *SMALL),
         "argument --max-seqlen-per-rank: '0' is invalid: expected an integer ≥ 1"),
    Case("new-seed-past-int64", ("compare", "--seed", "99999999999999999999", *SMALL),
         "argument --seed: '99999999999999999999' is invalid: expected an integer ≥ 0 (outside the int64 range"),
    Case("new-calibration-is-the-working-directory", ("compare", "--calibration", ".", *SMALL),
         ".: is a directory, not a regular file; expected a calibration file (JSON)"),
    Case("new-calibration-a-list", ("compare", "--calibration", "cal.json", *SMALL),
         "cal.json: the document = [1, 2] is invalid: expected a JSON object with keys name,",
         files={"cal.json": "[1, 2]\n"}),
    Case("new-parquet-trace-that-is-text", ("compare", "--trace", "t.parquet", *SMALL),
         "t.parquet: not a readable Parquet file", files={"t.parquet": "not parquet\n"}),
    Case("new-trace-negative-step", ("compare", "--trace", "t.csv", *SMALL),
         "t.csv: row 1, field 'step': negative (value -1); expected a non-negative whole step index",
         files={"t.csv": "length,step\n100,-1\n"}),
    Case("new-trace-step-past-int64", ("compare", "--trace", "t.csv", *SMALL),
         "t.csv: row 1, field 'step': outside the int64 range (value '1e30')",
         files={"t.csv": "length,step\n100,1e30\n"}),
    Case("new-scenario-pool-infinite", ("compare", "--scenario", "s.toml", "--no-progress"),
         "s.toml: pool = inf is invalid: expected an integer ≥ 1", files={"s.toml": "pool = 1e400\n"}),
    Case("new-sweep-pool-fraction", ("sweep", "g.toml", "-o", "out", "--no-progress"),
         "g.toml [grid]: pool = 1.5 is invalid: expected an integer ≥ 1",
         files={"g.toml": 'base = "default"\n[grid]\npool = [1.5]\n'}),
    Case("new-model-empty-folder", ("compare", "--model", "m", *SMALL), "m: the folder holds no config.json",
         files={"m": DIRECTORY}),
    Case("new-cost-cp-over-the-sequence", ("cost", "--model", "llama3-8b", "--seq-len", "4096", "--cp", "1000000"),
         "--cp 1,000,000 over --seq-len 4,096 leaves 0.0041 tokens per rank; expected --cp at most --seq-len"),
]
