"""The runner: train a small Llama-style model on Plans, on every process of a torch.distributed world.

One iteration on pool rank ``r`` (the world is the pool: W = DP × CP processes, PP = 1):

1. Before the clock starts, build the inputs of every microbatch ``r`` takes part in: its CP group's
   documents packed and dual-chunk sharded (:func:`real_runtime.data.shard_inputs`).
2. A barrier, then the clock's zero (the only barrier; everything after it synchronises only through the
   CP engines and the gradient all-reduce).
3. Per microbatch, in plan order: forward through the model with the attention engine of the rank's group
   (``cp_attention`` on the group's pre-created communicator from the :class:`GroupPool`, or
   ``varlen_attention`` for a group of one), loss = Σ token losses / (targets of the whole global batch),
   backward. Gradients accumulate over microbatches.
4. One all-reduce (sum) over the world of all gradients (plus the loss and every rank's ready time, which
   rides along), then the optimizer step.

Because every rank's loss is its own tokens' share of one global sum divided by one global count, the summed
gradient is exactly that of the single-process loss over the same sequences: :func:`reference_losses`
computes that loss without any process group, and tests compare the two.

Timeline: per rank and microbatch, forward and backward rows in the simulator's schema (``sim.timeline``):
``compute`` rows followed by exposed CP ``comm`` rows (time blocked in the engine's communication,
:mod:`real_runtime.timing`); per rank an ``idle`` row from its last backward to the moment the slowest rank
is ready (the DP wait), a ``comm``/``dp`` row for the all-reduce and a ``compute`` row for the optimizer step
(phase ``S``, microbatch -1). ``stage`` is 0; ``tokens`` is Σ L / degree of the rank's group. Extra keys
``workload`` and ``iteration`` (``session.RUN_KEYS``) say which run and iteration a row belongs to. Rank 0
builds every iteration's rows into a :class:`~dcpsim.sim.timeline.Timeline` (``Timeline.from_records``, which
checks each record against the one schema) before writing them (:mod:`real_runtime.session`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dcpsim.cost_models.presets import get_model
from dcpsim.policies.flatten import flatten
from dcpsim.real_runtime.attention import cp_attention, varlen_attention
from dcpsim.real_runtime.data import ShardInputs, num_targets, shard_inputs
from dcpsim.real_runtime.group_pool import GroupPool
from dcpsim.real_runtime.model import Decoder, build_model, token_loss_sum
from dcpsim.real_runtime.optim import make_optimizer
from dcpsim.real_runtime.options import OPTIMIZERS
from dcpsim.real_runtime.timing import Clock, CommTimer
from dcpsim.real_runtime.workload import Step, Workload

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


@dataclass(frozen=True)
class TrainConfig:
    """How to train: model preset, seed (weights and data), optimizer, precision, attention kernel.

    ``dtype`` ``bfloat16`` keeps float32 weights and runs the model under autocast; ``warmup`` runs that many
    untimed forward/backward passes of the first step's plan before the first iteration (gradients dropped,
    weights unchanged) so that one-time costs stay out of the timeline.
    """

    model: str = "tiny"
    seed: int = 0
    optimizer: str = "sgd"
    lr: float = 0.05
    dtype: str = "float32"
    attention_backend: str = "auto"
    warmup: int = 0
    comm_timing: bool = True

    def __post_init__(self) -> None:
        get_model(self.model)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r} is unknown; valid: {', '.join(OPTIMIZERS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is unknown; valid: {', '.join(DTYPES)}")
        if self.lr <= 0 or self.warmup < 0:
            raise ValueError(f"lr ({self.lr}) must be > 0 and warmup ({self.warmup}) ≥ 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def weight_dtype(self) -> torch.dtype:
        return torch.float64 if self.dtype == "float64" else torch.float32


@dataclass
class RankResult:
    """What one process measured: the loss of every iteration (the same on all ranks) and its timeline
    rows (dicts with the timeline columns plus ``workload`` and ``iteration``)."""

    losses: list[float]
    rows: list[dict[str, Any]]


def _autocast(cfg: TrainConfig, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.dtype == "bfloat16")


def _attention_fn(inp: ShardInputs, comm: Any, backend: str) -> Callable[..., torch.Tensor]:
    layout = inp.layout
    if layout is None:
        return lambda q, k, v: varlen_attention(q, k, v, inp.cu_seqlens, backend=backend)
    return lambda q, k, v: cp_attention(q, k, v, layout, comm, backend=backend)


def _my_microbatches(step: Step, rank: int, vocab: int, seed: int, device: torch.device):
    """(microbatch index, group, inputs) for every microbatch this rank takes part in, in plan order (the
    plan flattened against its batch by ``policies.flatten``: groups in plan order, each group's sequences
    with their lengths)."""
    fp = flatten(step.plan, step.batch)
    groups = [g for mb in step.plan.microbatches for g in mb.groups]  # FlatPlan's group order
    out = []
    for gi in fp.member_group[fp.member_rank == rank].tolist():
        g, seqs = groups[gi], slice(fp.seq_start[gi], fp.seq_start[gi + 1])
        inp = shard_inputs(fp.seq_id[seqs].tolist(), fp.groups.seq_len[seqs].tolist(), g.size, g.ranks.index(rank),
                           vocab, seed)
        out.append((int(fp.group_mb[gi]), g, inp.to(device)))
    return out


def _zero_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    grads = []
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        else:
            p.grad.zero_()
        grads.append(p.grad)
    return grads


class Trainer:
    """Trains one model on one workload on this process; collective over the world (see module doc)."""

    def __init__(self, workload: Workload, cfg: TrainConfig, pool: GroupPool, device: torch.device) -> None:
        if workload.pool_size != pool.world:
            raise ValueError(f"workload {workload.label!r} plans a pool of {workload.pool_size} ranks, the "
                             f"world has {pool.world} processes (PP = 1: the world is the pool)")
        self.workload, self.cfg, self.pool, self.device = workload, cfg, pool, device
        self.rank, self.world = pool.rank, pool.world
        self.spec = get_model(cfg.model)
        self.model: Decoder = build_model(self.spec, cfg.seed, device, cfg.weight_dtype)
        self.opt = make_optimizer(cfg.optimizer, self.model.parameters(), cfg.lr)
        self.clock = Clock(device)

    def _forward_backward(self, k: int, group: Any, inp: ShardInputs, total: int, timer: CommTimer,
                          it: int, rows: list[dict[str, Any]] | None) -> torch.Tensor:
        comm = None if inp.layout is None else self.pool.comm_for(group)
        attn = _attention_fn(inp, comm, self.cfg.attention_backend)
        c0, t0 = timer.seconds, self.clock.now()
        with _autocast(self.cfg, self.device):
            logits = self.model(inp.tokens, inp.positions, attn)
        loss = token_loss_sum(logits, inp.labels) / total
        c1, t1 = timer.seconds, self.clock.now()
        loss.backward()
        c2, t2 = timer.seconds, self.clock.now()
        if rows is not None:
            for phase, start, end, cs in (("F", t0, t1, c1 - c0), ("B", t1, t2, c2 - c1)):
                cs = min(max(cs, 0.0), end - start)
                base = {"workload": self.workload.label, "iteration": it, "stage": 0, "rank": self.rank,
                        "microbatch": k, "phase": phase, "tokens": inp.real_tokens}
                rows.append(dict(base, kind="compute", comm="", start=start, end=end - cs))
                if cs > 0:
                    rows.append(dict(base, kind="comm", comm="cp", start=end - cs, end=end))
        return loss.detach()

    def warmup(self, timer: CommTimer) -> None:
        """Untimed forward/backward passes of the first step (see :class:`TrainConfig`)."""
        step = self.workload.steps[0]
        total = max(num_targets(step.batch.lengths), 1)
        for _ in range(self.cfg.warmup):
            for k, g, inp in _my_microbatches(step, self.rank, self.spec.vocab, self.cfg.seed, self.device):
                self._forward_backward(k, g, inp, total, timer, -1, None)
        _zero_grads(self.model)

    def iteration(self, it: int, step: Step, timer: CommTimer) -> tuple[float, list[dict[str, Any]]]:
        """Run one iteration; returns its global loss and this rank's timeline rows."""
        total = num_targets(step.batch.lengths)
        if total < 1:
            raise ValueError(f"iteration {it}: the batch has no targets (every document has one token)")
        mine = _my_microbatches(step, self.rank, self.spec.vocab, self.cfg.seed, self.device)
        grads = _zero_grads(self.model)
        rows: list[dict[str, Any]] = []
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        dist.barrier()
        self.clock.reset()
        for k, g, inp in mine:
            loss_sum += self._forward_backward(k, g, inp, total, timer, it, rows).double()
        t_ready = self.clock.now()
        extra = torch.zeros(1 + self.world, dtype=grads[0].dtype, device=self.device)
        extra[0] = loss_sum
        extra[1 + self.rank] = t_ready
        flat = torch.cat([g.reshape(-1) for g in grads] + [extra])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        t_synced = self.clock.now()
        self.opt.step()
        t_end = self.clock.now()
        loss = float(flat[offset])
        sync_start = min(float(flat[offset + 1:].max()), t_synced)
        base = {"workload": self.workload.label, "iteration": it, "stage": 0, "rank": self.rank,
                "microbatch": -1, "phase": "S", "tokens": 0.0}
        if sync_start > t_ready:
            rows.append(dict(base, kind="idle", comm="", start=t_ready, end=sync_start))
        rows.append(dict(base, kind="comm", comm="dp", start=max(sync_start, t_ready), end=t_synced))
        rows.append(dict(base, kind="compute", comm="", start=t_synced, end=t_end))
        return loss, rows

    def run(self) -> RankResult:
        losses, rows = [], []
        timer = CommTimer(self.clock)
        with timer if self.cfg.comm_timing else contextlib.nullcontext(timer):
            self.warmup(timer)
            for it, step in enumerate(self.workload.steps):
                loss, r = self.iteration(it, step, timer)
                losses.append(loss)
                rows += r
        return RankResult(losses, rows)


def train(workload: Workload, cfg: TrainConfig, pool: GroupPool, device: torch.device | str = "cpu") -> RankResult:
    """Train ``cfg``'s model on ``workload`` on this process (collective over the world)."""
    return Trainer(workload, cfg, pool, torch.device(device)).run()


def reference_losses(workload: Workload, cfg: TrainConfig, device: torch.device | str = "cpu") -> list[float]:
    """The same training in one process without CP: every iteration runs all sequences of the batch with
    ``varlen_attention`` (one packed batch per plan microbatch, so memory stays that of one microbatch) and
    the same loss normalisation. Needs no process group."""
    device = torch.device(device)
    spec = get_model(cfg.model)
    model = build_model(spec, cfg.seed, device, cfg.weight_dtype)
    opt = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr)
    losses = []
    for step in workload.steps:
        total = num_targets(step.batch.lengths)
        fp = flatten(step.plan, step.batch)
        _zero_grads(model)
        loss_sum = 0.0
        for k in range(step.plan.num_microbatches):
            groups = np.flatnonzero(fp.group_mb == k)
            if not len(groups):
                continue
            seqs = slice(fp.seq_start[groups[0]], fp.seq_start[groups[-1] + 1])  # the microbatch's groups, in order
            if seqs.start == seqs.stop:
                continue
            inp = shard_inputs(fp.seq_id[seqs].tolist(), fp.groups.seq_len[seqs].tolist(), 1, 0, spec.vocab,
                               cfg.seed).to(device)
            with _autocast(cfg, device):
                logits = model(inp.tokens, inp.positions, _attention_fn(inp, None, cfg.attention_backend))
            loss = token_loss_sum(logits, inp.labels) / total
            loss.backward()
            loss_sum += float(loss.detach())
        opt.step()
        losses.append(loss_sum)
    return losses


def relative_errors(measured: list[float], reference: list[float]) -> np.ndarray:
    """|measured / reference - 1| per iteration."""
    m, r = np.asarray(measured, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    return np.abs(m / r - 1.0)
