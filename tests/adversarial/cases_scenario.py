"""Scenario files (``--scenario FILE.toml``): every field checked for type, finiteness, the int64 range and
its range; the files a scenario names (GPU, model, calibration) go through the same readers; a regular UTF-8
file of bounded nesting."""

from __future__ import annotations

from tests.adversarial.corpus import DIRECTORY, FIFO, Case


def scenario(name: str, content: object, expect: str, *, extra: dict | None = None, sub: bool = False) -> Case:
    argv = ("compare", "--scenario", name, "--iterations", "1", "--policies", "static-cp")
    return Case(f"scenario-{name}", argv, expect, files={name: content, **(extra or {})}, subprocess=sub)


INT64 = "outside the int64 range"
CASES = [
    scenario("pool_int64.toml", "pool = 100000000000000000000\n", f"pool = 100000000000000000000 is invalid: "
             f"expected an integer ≥ 1 ({INT64}"),
    scenario("seed_int64.toml", "seed = 9223372036854775808\n", INT64),
    scenario("pool_huge.toml", "pool = 100000\n", "job.pool = 100000 is invalid: at most 16,384"),
    scenario("context_huge.toml", "context_len = 9223372036854775807\n", "job.context_len = 9223372036854775807 "
             "is invalid: at most 1,099,511,627,776"),
    scenario("tokens_huge.toml", "global_batch_tokens = 1000000000000000\n",
             "job.global_batch_tokens = 1000000000000000 is invalid: at most 1,099,511,627,776"),
    scenario("reserve_nan.toml", "memory_reserve_gb = nan\n", "memory_reserve_gb = nan is invalid"),
    scenario("overlap_inf.toml", "tp_comm_overlap = inf\n", "tp_comm_overlap = inf is invalid"),
    scenario("overlap_range.toml", "tp_comm_overlap = 1.5\n", "tp_comm_overlap = 1.5 is invalid: expected a "
             "number ≥ 0 and ≤ 1"),
    scenario("pool_string.toml", 'pool = "16"\n', "pool = '16' is invalid: expected an integer ≥ 1"),
    scenario("pool_float.toml", "pool = 16.0\n", "pool = 16.0 is invalid"),
    scenario("typo.toml", "pol = 16\n", "unknown key 'pol'; valid keys: account_for_embedding_in_pipeline_split, "
             "account_for_loss_in_pipeline_split, attention_backend, calibration"),
    scenario("policies_string.toml", 'policies = "hydra"\n', "'policies' must be a list of policy names"),
    scenario("option_int64.toml", 'policies = ["static-cp:cp_degree=99999999999999999999"]\n', INT64),
    scenario("gpu_table_nan.toml", '[gpu]\nbase = "h200"\nhbm_gb = nan\n', "[gpu]: gpu.hbm_gb = nan is invalid"),
    scenario("gpu_fifo.toml", 'gpu = "pipe.toml"\n', "pipe.toml: is a FIFO (named pipe)",
             extra={"pipe.toml": FIFO}, sub=True),
    scenario("model_dir.toml", 'model = "m.json"\n', "is a directory, not a regular file; expected a model file",
             extra={"m.json": DIRECTORY}),
    scenario("calibration_dir.toml", 'calibration = "c.json"\n', "is a directory, not a regular file; "
             "expected a calibration file", extra={"c.json": DIRECTORY}),
    scenario("calibration_bad.toml", 'calibration = "c.json"\n', "c.json: key name is missing",
             extra={"c.json": "{}"}),
    scenario("options_int64.toml", "[policy_options]\ncp_degree = 100000000000000000000\n",
             f"[policy_options] policy 'static-cp': option cp_degree = 100000000000000000000 is invalid: expected "
             f"an integer ≥ 1, or None ({INT64}"),
    scenario("options_nan.toml", "[policy_options]\ntolerance = nan\n", "option tolerance = nan is invalid"),
    scenario("slow_ranks_nan.toml", 'slow_ranks = "3=nan"\n', "slow_ranks: '3=nan': factor 'nan' is invalid"),
    scenario("stragglers_range.toml", 'stragglers = "fraction=2"\n', "stragglers: fraction = 2.0 is invalid"),
    scenario("trace_mu.toml", 'trace = "lognormal:mu=1000,sigma=1"\n', "parameter 'mu' = 1000 is invalid"),
    scenario("latin1.toml", b"pool = 16\n# \xfe\n", "byte b'\\xfe' is not UTF-8"),
    scenario("deep.toml", "a = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    scenario("syntax.toml", "pool = \n", "not valid TOML"),
    scenario("dir.toml", DIRECTORY, "is a directory, not a regular file; expected a scenario file"),
    scenario("pipe.toml", FIFO, "is a FIFO (named pipe), not a regular file; expected a scenario file", sub=True),
]
