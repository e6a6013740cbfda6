"""Plans: the validator refuses a plan over another pool than the job's and a microbatch with no sequence (no
command reads a plan from a file, so these rows call the validator the CLI runs on every plan)."""

from __future__ import annotations

from tests.adversarial.corpus import ApiCase


def _validate(pool: int, groups: list, job_pool: int, lengths=(100, 200)) -> None:
    from dcpsim.policies import CPGroup, Engine, make_plan, validate_plan
    from dcpsim.traces.batching import GlobalBatch

    mbs = [[CPGroup(tuple(r), tuple(s), Engine.for_size("ring", len(r))) for r, s in mb] for mb in groups]
    validate_plan(make_plan("t", pool, mbs), GlobalBatch.of(list(lengths)), pool_size=job_pool)


CASES = [
    ApiCase("plan-32-ranks-for-16", lambda: _validate(32, [[(range(16), [0]), (range(16, 32), [1])]], 16),
            "the plan is for a pool of 32 ranks but the job has 16"),
    ApiCase("plan-4-ranks-for-16", lambda: _validate(4, [[(range(4), [0, 1])]], 16),
            "pool of 4 ranks but the job has 16"),
    ApiCase("plan-extra-empty-microbatch", lambda: _validate(2, [[((0, 1), [0, 1])], []], 2),
            "microbatch 1 holds no sequence"),
    ApiCase("plan-microbatch-of-empty-groups",
            lambda: _validate(2, [[((0, 1), [0, 1])], [((0,), []), ((1,), [])]], 2),
            "microbatch 1 holds no sequence"),
]
