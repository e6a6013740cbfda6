"""--overlap-grad-reduce / --overlap-param-gather (cost_models.dp_overlap; CostTerms.dp_overlap): each hides all
but one bucket of its collective."""

from __future__ import annotations

import pytest

from dcpsim.cost_models import AnalyticCostModel, JobSpec, get_gpu, get_model
from dcpsim.cost_models.dp_overlap import bucket_params, exposed_fractions
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.memory import stage_params
from dcpsim.cost_models.terms import CostTerms


def job(**kw):
    return JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h100"), tp=1, pp=2, pool=64, **kw)


def test_bucket_size_is_megatrons_default():
    assert bucket_params(job()) == 64_000_000  # max(40M, 1M · 64)
    assert bucket_params(JobSpec(model=get_model("llama3-8b"), gpu=get_gpu("h100"), pool=8)) == 40_000_000


def test_each_flag_hides_all_but_one_bucket():
    plain, grad, both = job(), job(overlap_grad_reduce=True), job(overlap_grad_reduce=True, overlap_param_gather=True)
    params = stage_params(plain, 1)
    assert exposed_fractions(plain, params) == (1.0, 1.0)
    assert exposed_fractions(grad, params) == (pytest.approx(64e6 / params), 1.0)
    s = [AnalyticCostModel(j).grad_sync_s(1) for j in (plain, grad, both)]
    assert s[0] > s[1] > s[2] > 0
    assert s[2] == pytest.approx(s[0] * 64e6 / params, rel=1e-9)  # RS and AG both down to one bucket
    off = CostTerms.parse("all,-dp_overlap")
    assert AnalyticCostModel(both, terms=off).grad_sync_s(1) == s[0]


def test_param_gather_needs_grad_reduce():
    with pytest.raises(SpecError, match="job.overlap_param_gather"):
        job(overlap_param_gather=True)
