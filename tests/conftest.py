"""Shared fixtures: small jobs, batches and cost models for tests."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings

# In CI, property tests draw the same examples every run (a failure there is reproducible, never a fluke).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from dcpsim.cost_models import AnalyticCostModel, ConstantCostModel, JobSpec, get_gpu, get_model


@dataclass(frozen=True)
class Batch:
    """A minimal global batch (what policies need)."""

    seq_ids: np.ndarray
    lengths: np.ndarray

    @staticmethod
    def of(lengths) -> Batch:
        L = np.asarray(lengths, dtype=np.int64)
        return Batch(np.arange(len(L), dtype=np.int64), L)


@pytest.fixture
def make_batch():
    return Batch.of


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
