"""Fingerprints of HyDra's whole plans: the pin that a redesign of policies/hydra must keep.

Cases: the default scenario (``dcpsim compare``'s) and every shipped scenario (experiments/scenarios/*.toml) at
seeds 0, 1 and 2, every iteration of each
(HyDra with the scenario's own policy options), and the scheduling benchmark's cells (n sequences of the 256k
preset over W ranks; llama3-8b on H200, TP 1, PP 4; a per-rank budget for about 8 microbatches on memory alone)
with three option sets. A case's fingerprint is the SHA-256 of its plans' JSON (``Plan.to_dict``, the floats of
its ``meta`` at 10 significant digits) in iteration order, so any change to any group, rank, engine or
microbatch of any plan changes it, and last-bit rounding of the planner's estimates does not.

Regenerate (only in a commit that says why the plans changed, with the efficiency check of docs/hydra.md):

    .venv/bin/python -m tests.policies.hydra_pin --write
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

PIN = Path(__file__).resolve().parents[1] / "data" / "hydra_plan_pin.json"
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "experiments" / "scenarios"
SEEDS = (0, 1, 2)
BENCH_CELLS = ((512, 64), (2048, 256), (2048, 64), (8192, 1024))
BENCH_OPTIONS = ("", "degrees=pow2", "cp_engine=ring,tolerance=0.1")


def _rounded(value):
    """``value`` with every float at 10 significant digits: the planner's own estimates in ``Plan.meta``
    (target, caps, estimated time) then ignore last-bit rounding of the cost model's arithmetic."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _digest(plans) -> str:
    h = hashlib.sha256()
    for plan in plans:
        d = plan.to_dict()
        d["meta"] = _rounded(d["meta"])
        h.update(json.dumps(d, sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()


def scenario_cases() -> dict[str, tuple]:
    out: dict[str, tuple] = {"scenario:default:seed=0": (None, 0)}
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        for seed in SEEDS:
            out[f"scenario:{path.stem}:seed={seed}"] = (path, seed)
    return out


def scenario_fingerprint(path: Path | None, seed: int) -> str:
    from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO
    from dcpsim.experiments.scenario.files import load_scenario
    from dcpsim.policies import create_policy

    sc = (DEFAULT_SCENARIO if path is None else load_scenario(str(path))).with_(seed=seed)
    cm = sc.cost_model()
    from dcpsim.policies.registry import policy_options

    names = policy_options("hydra")
    policy = create_policy("hydra", **{k: v for k, v in sc.policy_options.items() if k in names})
    return _digest(policy.plan(batch, cm.job, cm) for batch in sc.batches())


def bench_fingerprint(n: int, w: int, options: str) -> str:
    from dcpsim import traces
    from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
    from dcpsim.policies import create_policy
    from dcpsim.traces.batching import GlobalBatch

    preset = traces.get_preset("256k")
    lengths = preset.sample(n, 0)
    budget = max(math.ceil(lengths.sum() / (w * 8)), math.ceil(lengths.max() / w))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=w,
                  context_len=int(preset.context_len), max_tokens_per_rank=int(budget))
    from dcpsim.policies.registry import parse_options

    kwargs = parse_options("hydra", dict(kv.split("=") for kv in options.split(",") if kv), from_text=True)
    policy = create_policy("hydra", **kwargs)
    return _digest([policy.plan(GlobalBatch.of(lengths), job, AnalyticCostModel(job))])


def all_cases() -> list[str]:
    names = list(scenario_cases())
    names += [f"bench:n={n}:w={w}:{opt or 'default'}" for n, w in BENCH_CELLS for opt in BENCH_OPTIONS]
    return names


def fingerprint(case: str) -> str:
    kind, *rest = case.split(":")
    if kind == "scenario":
        path, seed = scenario_cases()[case]
        return scenario_fingerprint(path, seed)
    n, w, opt = int(rest[0][2:]), int(rest[1][2:]), rest[2]
    return bench_fingerprint(n, w, "" if opt == "default" else opt)


def main(argv: list[str]) -> int:
    got = {case: fingerprint(case) for case in all_cases()}
    if "--write" in argv:
        PIN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} fingerprints to {PIN}")
        return 0
    want = json.loads(PIN.read_text())
    diff = [c for c in got if want.get(c) != got[c]]
    print(f"same {len(got) - len(diff)}" + (f", different {len(diff)}: {', '.join(diff)}" if diff else ""))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
