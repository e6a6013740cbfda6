"""Two small deterministic optimizers for the runner: SGD and AdamW.

Why not ``torch.optim``: constructing its first optimizer imports ``torch._dynamo``, over a second per
process, which dominates a short CPU run of several processes. These are the textbook updates, applied
parameter by parameter in a fixed order, so the distributed run and its single-process reference perform
bit-for-bit the same arithmetic on the same gradients.

* SGD: ``p ← p − lr · g``.
* AdamW (Loshchilov & Hutter 2019, as ``torch.optim.AdamW``): ``m ← β1 m + (1−β1) g``,
  ``v ← β2 v + (1−β2) g²``, ``p ← p (1 − lr·wd) − lr · m̂ / (√v̂ + ε)`` with bias-corrected ``m̂, v̂``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class SGD:
    """Plain gradient descent."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.lr = float(lr)

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


class AdamW:
    """Adam with decoupled weight decay."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), betas, float(eps), float(weight_decay)
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1.0 - b1 ** self.t, 1.0 - b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            p.mul_(1.0 - self.lr * self.weight_decay)
            m.mul_(b1).add_(g, alpha=1.0 - b1)
            v.mul_(b2).addcmul_(g, g, value=1.0 - b2)
            denom = (v / c2).sqrt_().add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / c1)


Optimizer = SGD | AdamW


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float) -> Optimizer:
    """``sgd`` or ``adamw`` (betas 0.9 / 0.95, weight decay 0.01)."""
    if name == "sgd":
        return SGD(params, lr)
    if name == "adamw":
        return AdamW(params, lr)
    raise ValueError(f"optimizer {name!r} is unknown; valid: sgd, adamw")


__all__ = ["SGD", "AdamW", "make_optimizer"]
