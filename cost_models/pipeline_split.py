"""Megatron-Core's pipeline split: the transformer layers of every (virtual) pipeline stage, and the rules a
layout must keep. :class:`~cost_models.specs.JobSpec` checks its layout with :func:`check_pipeline_split` and
keeps :func:`pipeline_split`'s table (``JobSpec.split``); time, memory, recompute, the engine's chunk shares
and the bound read that table.

Megatron's options (TransformerConfig fields; Megatron-LM flags):

* none: layers / (p · V) per virtual stage;
* ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the embedding (loss)
  counts as one layer, so every virtual stage has (layers + e + l) / (p · V) slots, and the first virtual stage
  (chunk 0 of rank 0) builds one transformer layer fewer, the last (chunk V − 1 of rank p − 1) one fewer;
* ``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage`` (``--decoder-first-pipeline-
  num-layers`` / ``--decoder-last-pipeline-num-layers``): rank 0 (p − 1) holds that many layers, the other ranks
  share the rest evenly; each rank's layers are split evenly over its V chunks.
"""

from __future__ import annotations

from dcpsim.cost_models.errors import require

Split = tuple[tuple[int, ...], ...]


def _middle(layers: int, pp: int, first: int | None, last: int | None) -> tuple[int, int]:
    """(middle stages, their layers) when the first and/or last stage hold a given number of layers."""
    return pp - (first is not None) - (last is not None), layers - (first or 0) - (last or 0)


def pipeline_split(layers: int, pp: int, vpp: int = 1, account_for_embedding: bool = False,
                   account_for_loss: bool = False, first: int | None = None, last: int | None = None) -> Split:
    """Transformer layers of chunk c of pipeline rank r, ``[r][c]``, as Megatron-Core builds them
    (megatron/core/transformer/transformer_block.py, ``get_num_layers_to_build``; the layers' order,
    transformer_layer.py ``get_transformer_layer_offset``, is that of the virtual stages k = c·p + r; the options
    as the module docstring says). The layout is assumed valid (:func:`check_pipeline_split`)."""
    if first is not None or last is not None:
        stages, middle = _middle(layers, pp, first, last)
        per_rank = [middle // stages if stages else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        return tuple((n // vpp,) * vpp for n in per_rank)
    slots = (layers + account_for_embedding + account_for_loss) // (pp * vpp)
    table = [[slots] * vpp for _ in range(pp)]
    if account_for_embedding:
        table[0][0] -= 1
    if account_for_loss:
        table[pp - 1][vpp - 1] -= 1
    return tuple(tuple(row) for row in table)


def check_pipeline_split(layers: int, pp: int, vpp: int, account_for_embedding: bool, account_for_loss: bool,
                         first: int | None, last: int | None) -> None:
    """Megatron's rules for the layers of every (virtual) pipeline stage of a job, each refused in one line naming
    the JobSpec field (Megatron-Core transformer_config.py, ``TransformerConfig.__post_init__``, "Uneven PP" and
    the account_for_* branch; Megatron-LM megatron/training/arguments.py, the same divisibility asserts)."""
    L, p, v = layers, pp, vpp
    emb, loss = account_for_embedding, account_for_loss
    require(isinstance(emb, bool), "job.account_for_embedding_in_pipeline_split", emb, "true or false")
    require(isinstance(loss, bool), "job.account_for_loss_in_pipeline_split", loss, "true or false")
    for f, n in (("num_layers_in_first_pipeline_stage", first), ("num_layers_in_last_pipeline_stage", last)):
        if n is None:
            continue
        require(not (emb or loss), f"job.{f}", n, "unset when account_for_embedding_in_pipeline_split or "
                "account_for_loss_in_pipeline_split is true (Megatron-Core: not both kinds of uneven split)")
        require(isinstance(n, int) and not isinstance(n, bool) and n >= 1, f"job.{f}", n,
                "a positive integer (Megatron-Core: must be larger than 0)")
        require(p >= 2, f"job.{f}", n, f"unset at job.pp = {p} (an uneven split needs pp ≥ 2)")
        require(n % v == 0, f"job.{f}", n, f"a multiple of job.vpp = {v} (whole layers per model chunk)")
    if first is not None or last is not None:
        what = "job.num_layers_in_first_pipeline_stage" if first is not None else \
            "job.num_layers_in_last_pipeline_stage"
        value = first if first is not None else last
        stages, middle = _middle(L, p, first, last)
        require(middle >= 0, what, value, f"first + last at most model.layers = {L}")
        require(bool(middle) == bool(stages), what, value,
                f"leaves {middle} layers for {stages} middle stages (Megatron-Core: both or neither)")
        if stages:
            require(middle % stages == 0, what, value, f"leaves {middle} layers, not a multiple of the "
                    f"{stages} middle stages")
            require((middle // stages) % v == 0, what, value, f"leaves {middle // stages} layers per middle "
                    f"stage, not a multiple of job.vpp = {v}")
        return
    if emb or loss:
        n = L + emb + loss
        why = " and ".join(f for f, on in (("account_for_embedding_in_pipeline_split", emb),
                                            ("account_for_loss_in_pipeline_split", loss)) if on)
        require(n % p == 0, "job.pp", p, f"must divide model.layers + {n - L} = {n} ({why}: each counts as "
                "a layer)")
        require((n // p) % v == 0, "job.vpp", v, f"must divide (model.layers + {n - L}) / pp = {n // p} ({why})")
        return
    require(L % p == 0, "job.pp", p, f"must divide model.layers = {L}")
    if v > 1:
        require(L % (p * v) == 0, "job.vpp", v, f"pp · vpp = {p * v} must divide model.layers = {L}")
