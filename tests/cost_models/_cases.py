"""Jobs, batches and random options shared by the cost-model fast-path tests (test_group_costs_fast_paths,
test_alone_total)."""

from dataclasses import replace

import numpy as np

from dcpsim.cost_models import AnalyticCostModel, Calibration, CostTerms, JobSpec, get_gpu, get_model
from dcpsim.cost_models.base import GroupBatch
from dcpsim.cost_models.calibration import DATA_DIR, default_calibration


def make_job(model="llama3-8b", gpu="h200", tp=1, pp=4, pool=64):
    return JobSpec(model=get_model(model), gpu=get_gpu(gpu), tp=tp, pp=pp, pool=pool, context_len=262144,
                   max_tokens_per_rank=16384)


def alone(lengths, sizes, ulysses, first=None):
    """Each sequence alone in its group (group i sequence i), from pool rank 0 unless ``first`` is given."""
    n = len(lengths)
    return GroupBatch(np.asarray(lengths, dtype=np.int64), np.arange(n, dtype=np.int64),
                      np.asarray(sizes, dtype=np.int64), np.asarray(ulysses, dtype=np.int64),
                      np.zeros(n, dtype=np.int64) if first is None else np.asarray(first, dtype=np.int64))


def random_options(rng, n, job):
    """``n`` random (size, Ulysses degree) pairs: sizes 1..64, u ≤ size dividing the job's KV heads per rank."""
    sizes = rng.choice([1, 2, 4, 8, 16, 32, 64], n)
    u = np.minimum(sizes, rng.choice([1, 2, 4, 8], n))
    return sizes, np.where(job.kv_heads_per_rank % u == 0, u, 1)


GOLDEN_CALIBRATION = DATA_DIR / "calibration_h200_kernels.json"


def calibration_before(gpu: str) -> Calibration:
    """The GPU's default before the end-to-end fits (build_defaults steps 6 and 7): its kernel fit, GEMMs at the
    published 791.2 TFLOP/s (the H100 and H200 kernel fits share their GEMM and link terms)."""
    kernels = Calibration.load(GOLDEN_CALIBRATION)
    if gpu == "h200":
        return kernels
    return replace(default_calibration(get_gpu(gpu)), gemm=kernels.gemm)


def golden_model(terms: str) -> AnalyticCostModel:
    """The model the goldens 'of the version before' were printed with: the H200 kernel fit (the H200 default
    before the end-to-end fit) and GEMMs on its token curve (``-gemm_shapes``: the term came later)."""
    return AnalyticCostModel(make_job(), Calibration.load(GOLDEN_CALIBRATION),
                             CostTerms.parse(terms if terms == "legacy" else terms + ",-gemm_shapes"))
