"""Shared fixtures: small jobs and cost models for tests (batches: ``dcpsim.traces.batching.GlobalBatch.of``)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# In CI, property tests draw the same examples every run (a failure there is reproducible, never a fluke).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, JobSpec, get_gpu, get_model


def small_job(**kw) -> JobSpec:
    base = {"model": get_model("llama3-8b"), "gpu": get_gpu("h100"), "tp": 1, "pp": 1, "pool": 8,
            "context_len": 32768, "global_batch_tokens": 1 << 18}
    base.update(kw)
    return JobSpec(**base)


@pytest.fixture
def job8b():
    return small_job()


@pytest.fixture
def analytic(job8b):
    return AnalyticCostModel(job8b)


def constant_model(**kw) -> ConstantCostModel:
    job = small_job(pp=kw.pop("pp", 1), pool=kw.pop("pool", 8))
    return ConstantCostModel(job, **kw)
