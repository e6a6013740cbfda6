"""Which first-order terms of the analytic cost model are switched on.

Every term added to the model after its first version can be switched off, one at a time or all together, so
that a reader can see which conclusion depends on which physics (docs/cost_model.md's sensitivity table) and
so that the first version's numbers stay reproducible (``legacy``: every term below off).

Text form (``--cost-terms``, scenario field ``cost_terms``): ``all`` (the default), ``legacy``, or either
followed by ``,-NAME`` / ``,+NAME`` edits, e.g. ``all,-tp_comm`` or ``legacy,+lm_head``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dcpsim.cost_models.errors import SpecError


@dataclass(frozen=True)
class CostTerms:
    """On/off switch per term (all on by default)."""

    tp_comm: bool = True  # TP + sequence-parallel all-gathers / reduce-scatters per layer
    lm_head: bool = True  # embedding (first stage), LM head and loss (last stage): compute and memory
    fixed_costs: bool = True  # per layer, per ring step, per collective call, per microbatch
    attention_backend: bool = True  # per-backend attention curves (FA2 / FA3 / cuDNN), fwd and bwd
    links: bool = True  # transfers priced by the ranks they connect; NIC scaling across nodes
    memory_extra: bool = True  # logits, CP receive buffers and attention workspace in memory
    activation_shapes: bool = True  # activations counted from the model's shapes (GQA, MLP) instead of 34·h
    kernels: bool = True  # memory-bound operators (norms, RoPE, activation, residuals) at HBM bandwidth
    recompute: bool = True  # the job's activation recompute (Megatron --recompute-*) in time and memory
    dp_overlap: bool = True  # the job's --overlap-grad-reduce / --overlap-param-gather hide DP collectives
    grad_dtype: bool = True  # the DP reduce-scatter moves the gradient buffer's dtype (fp32 by default), not bf16
    gemm_shapes: bool = True  # GEMMs by (M, N, K): math + HBM traffic, dgrad and wgrad apart (cost_models.gemm)

    @staticmethod
    def names() -> list[str]:
        return [f.name for f in fields(CostTerms)]

    @staticmethod
    def legacy() -> CostTerms:
        return CostTerms(**{n: False for n in CostTerms.names()})

    @staticmethod
    def parse(text: str, origin: str = "cost_terms") -> CostTerms:
        parts = [p.strip() for p in str(text).split(",") if p.strip()]
        valid = ("'all' or 'legacy', optionally followed by ,-NAME or ,+NAME with NAME one of "
                 f"{', '.join(CostTerms.names())}")
        if not parts or parts[0] not in ("all", "legacy"):
            raise SpecError(f"{origin} = {text!r} is invalid: expected {valid}")
        terms = CostTerms() if parts[0] == "all" else CostTerms.legacy()
        for p in parts[1:]:
            name = p[1:]
            if p[:1] not in "+-" or name not in CostTerms.names():
                raise SpecError(f"{origin} = {text!r}: {p!r} is invalid: expected {valid}")
            terms = replace(terms, **{name: p[0] == "+"})
        return terms

    def label(self) -> str:
        """The shortest text that :meth:`parse` reads back as these terms."""
        off = [n for n in self.names() if not getattr(self, n)]
        on = [n for n in self.names() if getattr(self, n)]
        if len(off) <= len(on):
            return ",".join(["all"] + [f"-{n}" for n in off])
        return ",".join(["legacy"] + [f"+{n}" for n in on])
