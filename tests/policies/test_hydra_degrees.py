"""policies/hydra/degrees.py: the degrees and planning engines of several targets at once are those of each
target alone, bit for bit, on one pricer (its memo serves the later targets) and on fresh ones."""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.policies.hydra.degrees import allowed_degrees, planning_engines_many, sequence_degrees_many
from dcpsim.policies.hydra.target import TargetSearch, build_target_model, choose_target
from dcpsim.policies.hydra.work import Pricer, build_grid
from dcpsim.traces import get_preset


def _setup(n: int, w: int, seed: int):
    lengths = np.asarray(get_preset("256k").sample(n, seed), dtype=np.int64)
    budget = max(int(np.ceil(lengths.sum() / (w * 8))), int(np.ceil(lengths.max() / w)))
    job = JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h200"), tp=1, pp=4, pool=w, context_len=262144,
                  max_tokens_per_rank=budget)
    cm = AnalyticCostModel(job)
    pricer = Pricer(lengths, cm)
    D = allowed_degrees(w, "pow2", 1, "auto", job)
    grid = build_grid(lengths, D, "auto", job, cm, budget, pricer=pricer)
    tm = build_target_model(grid)
    kmin = np.searchsorted(budget * D, lengths, side="left")
    m0 = choose_target(TargetSearch(grid, tm, w, 4, lengths, budget), None)
    m = m0.m_light + m0.m_heavy
    taus = [choose_target(TargetSearch(grid, tm, w, 4, lengths, budget), k).tau for k in (m, -(-m // 2), -(-m // 3))]
    return lengths, job, pricer, grid, tm, kmin, D, taus


def _calls(pricer: Pricer) -> list[int]:
    count = [0]
    cm = pricer.cost_model
    price = cm.pricing().alone_stage_totals

    def counted(*a, **k):
        count[0] += 1
        return price(*a, **k)
    object.__setattr__(cm, "alone_stage_totals", counted)  # (this test's own cost model, frozen)
    return count


def test_several_targets_at_once_equal_each_alone() -> None:
    for n, w, seed in [(2048, 256, 0), (1024, 64, 3), (512, 32, 1)]:
        together_setup = _setup(n, w, seed)
        lengths, job, pricer, grid, tm, kmin, D, taus = together_setup
        calls = _calls(pricer)
        degs = sequence_degrees_many(grid, tm, taus, lengths, kmin, pricer)
        engs = planning_engines_many([(D[k], u, h, t) for (k, u, h), t in zip(degs, taus)], lengths, job, pricer,
                                     "auto")
        together_calls = calls[0]
        alone_calls = 0
        for i, tau in enumerate(taus):  # each target alone, on a fresh pricer
            lengths, job, fresh, grid, tm, kmin, D, _ = _setup(n, w, seed)
            c = _calls(fresh)
            (k, u, h), = sequence_degrees_many(grid, tm, [tau], lengths, kmin, fresh)
            (ue, sh, ovh), = planning_engines_many([(D[k], u, h, tau)], lengths, job, fresh, "auto")
            alone_calls += c[0]
            assert k.tobytes() == degs[i][0].tobytes() and u.tobytes() == degs[i][1].tobytes()
            assert h.tobytes() == degs[i][2].tobytes()
            assert ue.tobytes() == engs[i][0].tobytes() and sh.tobytes() == engs[i][1].tobytes()
            assert ovh == engs[i][2]
        assert together_calls <= alone_calls  # (the pricer's memo: what one target priced, the next reads)
