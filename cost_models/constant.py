"""A constant-rate cost model for tests: time is proportional to tokens per rank, communication is free
unless asked for. Closed-form results (the 1F1B bubble) are exact under it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dcpsim.cost_models.base import GroupBatch, GroupCosts
from dcpsim.cost_models.flops import model_flops
from dcpsim.cost_models.specs import JobSpec


@dataclass(frozen=True)
class ConstantCostModel:
    job: JobSpec
    fwd_s_per_token: float = 1e-6
    bwd_factor: float = 2.0
    pp_s: float = 0.0  # per transfer
    grad_sync: float = 0.0
    optimizer: float = 0.0
    budget_tokens: int = 1 << 30

    def group_costs(self, groups: GroupBatch, stage: int = 0) -> GroupCosts:
        f = groups.tokens_per_rank() * self.fwd_s_per_token
        z = np.zeros_like(f)
        return GroupCosts(f, z, self.bwd_factor * f, z.copy())

    def pp_transfer_s(self, tokens_per_rank: np.ndarray, stage: int, rank: np.ndarray | int = 0) -> np.ndarray:
        return np.full(np.broadcast(np.asarray(tokens_per_rank), np.asarray(rank)).shape, self.pp_s,
                       dtype=np.float64)

    def grad_sync_s(self, stage: int) -> float:
        return self.grad_sync

    def optimizer_s(self, stage: int) -> float:
        return self.optimizer

    def max_tokens_per_rank(self) -> int:
        return self.job.max_tokens_per_rank or self.budget_tokens

    def peak_memory_gb(self, max_tokens_in_flight: np.ndarray, stage: int, largest_tokens=None,
                       cp_tokens=None) -> np.ndarray:
        return np.asarray(max_tokens_in_flight, dtype=np.float64) * 0.0

    def model_flops(self, lengths: np.ndarray) -> float:
        return model_flops(lengths, self.job.model)
