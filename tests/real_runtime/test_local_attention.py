"""Single-process pieces of the CP engines: layout, local kernel with LSE, merging, the Ulysses permutation."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from dcpsim.real_runtime.attention import (
    CPAttentionError,
    CPComm,
    DualChunkLayout,
    MathBackend,
    cp_attention,
    cu_seqlens_from_lengths,
    default_scale,
    merge_partials,
    reference_attention,
    resolve_backend,
    ulysses_gather_order,
    varlen_attention,
)

DOCS = (37, 128, 5, 90)


def _qkv(lengths, heads=4, kv_heads=2, dim=16, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    return (torch.randn(t, heads, dim, generator=gen, dtype=dtype),
            torch.randn(t, kv_heads, dim, generator=gen, dtype=dtype),
            torch.randn(t, kv_heads, dim, generator=gen, dtype=dtype),
            torch.randn(t, heads, dim, generator=gen, dtype=dtype))


def _reference_with_grads(q, k, v, dout, cu):
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = reference_attention(*leaves, cu)
    out.backward(dout)
    return out.detach(), [x.grad for x in leaves]


# ---- layout ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("degree", [1, 2, 3, 4, 8])
def test_shard_unshard_roundtrip_and_padding(degree):
    layout = DualChunkLayout.build(DOCS, degree)
    assert all(p % (2 * degree) == 0 and 0 <= p - n < 2 * degree for n, p in zip(layout.lengths, layout.padded))
    x = torch.arange(layout.total_tokens, dtype=torch.float32).unsqueeze(1)
    shards = [layout.shard(x, r) for r in range(degree)]
    assert all(s.shape[0] == layout.local_tokens for s in shards)
    assert torch.equal(layout.unshard(shards), x)
    covered = torch.cat([torch.as_tensor(layout.global_index(r)) for r in range(degree)])
    assert sorted(covered[covered >= 0].tolist()) == list(range(layout.total_tokens))


def test_rank_holds_chunks_i_and_mirror():
    layout = DualChunkLayout.build([16], 4)  # 8 chunks of 2 tokens
    assert layout.positions(0).tolist() == [0, 1, 14, 15]
    assert layout.positions(1).tolist() == [2, 3, 12, 13]
    assert layout.positions(3).tolist() == [6, 7, 8, 9]


@pytest.mark.parametrize("degree", [2, 3, 4])
def test_dual_chunks_balance_causal_work_exactly(degree):
    layout = DualChunkLayout.build([24 * degree], degree)
    pairs = [int((layout.positions(r) + 1).sum()) for r in range(degree)]  # keys seen by each local query
    assert len(set(pairs)) == 1


def test_layout_errors_name_the_problem():
    with pytest.raises(ValueError, match="document 1 has length 0"):
        DualChunkLayout.build([3, 0], 2)
    with pytest.raises(ValueError, match="multiple of 2·degree"):
        DualChunkLayout((5,), (6,), 2)
    with pytest.raises(ValueError, match="tokens"):
        DualChunkLayout.build([5], 2).shard(torch.zeros(4, 1), 0)


# ---- local kernel -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_varlen_attention_matches_reference(heads, kv_heads):
    cu = cu_seqlens_from_lengths(DOCS)
    q, k, v, dout = _qkv(DOCS, heads, kv_heads)
    ref, grads = _reference_with_grads(q, k, v, dout, cu)
    leaves = [x.float().requires_grad_() for x in (q, k, v)]
    out = varlen_attention(*leaves, cu)
    out.backward(dout.float())
    assert (out.double() - ref).abs().max() <= 1e-5
    for leaf, g in zip(leaves, grads):
        assert (leaf.grad.double() - g).abs().max() <= 1e-5


def test_merging_two_key_halves_equals_attention_over_all_keys():
    """Non-causal attention of q to keys split in two disjoint sets, merged by LSE, equals one pass."""
    # float64 inputs; the merge accumulates in float32 (eps 1.2e-7) on outputs up to about 2, so a few float32
    # ulps of the float64 reference is the right bound (a wrong weight would be off by ~0.1).
    q, k, v, _ = _qkv([40], 4, 2, seed=1, dtype=torch.float64)
    kern, scale = MathBackend(), default_scale(q.shape[-1])
    full, full_lse = kern.forward(q, k, v, (0, 40), (0, 40), False, scale)
    o1, l1 = kern.forward(q, k[:15], v[:15], (0, 40), (0, 15), False, scale)
    o2, l2 = kern.forward(q, k[15:], v[15:], (0, 40), (0, 25), False, scale)
    merged, lse = merge_partials(o1, l1, o2, l2)
    assert (merged.double() - full).abs().max() <= 2e-6 and (lse.double() - full_lse).abs().max() <= 2e-6


def test_merge_keeps_rows_without_keys_finite():
    out = torch.zeros(2, 1, 3)
    lse = torch.full((2, 1), float("-inf"))
    blk_out = torch.ones(2, 1, 3)
    blk_lse = torch.tensor([[0.5], [float("-inf")]])
    merged, new = merge_partials(out, lse, blk_out, blk_lse)
    assert torch.equal(merged[0], blk_out[0]) and torch.equal(merged[1], torch.zeros(1, 3))
    assert new[1].item() == float("-inf")


def test_auto_backend_on_cpu_is_math():
    assert resolve_backend(None, torch.zeros(1, 1, 8)).name == "math"
    with pytest.raises(ValueError, match="unknown attention backend"):
        resolve_backend("cudnn", torch.zeros(1, 1, 8))


# ---- engines without communication -----------------------------------------------------------------------
def test_degree_one_group_is_local_attention():
    layout = DualChunkLayout.build(DOCS, 1)
    q, k, v, dout = _qkv(DOCS)
    ref, grads = _reference_with_grads(q, k, v, dout, layout.cu_seqlens)
    shards = [layout.shard(x.float(), 0).requires_grad_() for x in (q, k, v)]
    out = cp_attention(*shards, layout, CPComm.single())
    out.backward(layout.shard(dout.float(), 0))
    assert (layout.unshard([out.detach()]).double() - ref).abs().max() <= 1e-5
    for shard, g in zip(shards, grads):
        assert (layout.unshard([shard.grad]).double() - g).abs().max() <= 1e-5


@pytest.mark.parametrize("u,r", [(2, 2), (4, 1), (2, 3), (3, 2)])
def test_ulysses_gather_order_yields_the_outer_dual_chunk_shard(u, r):
    """Concatenating the u inner shards (what the all-to-all delivers) and applying the order gives the
    degree-r shard of the outer group, for every outer group."""
    layout = DualChunkLayout.build(DOCS, u * r)
    outer = layout.with_degree(r)
    x = torch.arange(layout.total_tokens, dtype=torch.float32) + 1  # pads become 0
    order, inverse = ulysses_gather_order(layout, u)
    for j in range(r):
        gathered = torch.cat([layout.shard(x, j * u + i) for i in range(u)])
        assert torch.equal(gathered[torch.tensor(order)], outer.shard(x, j))
        assert torch.equal(gathered[torch.tensor(order)][torch.tensor(inverse)], gathered)


def test_engine_input_errors_are_value_errors():
    layout = DualChunkLayout.build([8], 1)
    q, k, v, _ = _qkv([8], dtype=torch.float32)
    with pytest.raises(CPAttentionError, match="shard must have"):
        cp_attention(q[:7], k[:7], v[:7], layout, CPComm.single())
    with pytest.raises(ValueError, match="layout is for 2 ranks"):
        cp_attention(q, k, v, DualChunkLayout.build([8], 2), CPComm.single())
    with pytest.raises(ValueError, match="must equal the group size"):
        CPComm((0, 1, 2), 0, 2, 1)


def test_package_imports_without_simpy():
    code = ("import sys; sys.modules['simpy'] = None; import real_runtime, real_runtime.attention; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sim', 'experiments')]; assert not bad, bad")
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


# ---- GPU kernels (only where available) ------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flash_backend_matches_math_backend_on_gpu():
    pytest.importorskip("flash_attn")
    from dcpsim.real_runtime.attention.flash import FlashAttnBackend

    cu = cu_seqlens_from_lengths(DOCS)
    q, k, v, dout = (t.to("cuda", torch.bfloat16) for t in _qkv(DOCS, 8, 2, 64, dtype=torch.float32))
    scale = default_scale(64)
    flash, math_ = FlashAttnBackend(), MathBackend()
    for causal in (True, False):
        o_f, l_f = flash.forward(q, k, v, cu, cu, causal, scale)
        o_m, l_m = math_.forward(q, k, v, cu, cu, causal, scale)
        assert (o_f.float() - o_m.float()).abs().max() < 2e-2 and (l_f - l_m).abs().max() < 2e-2
        grads_f = flash.backward(dout, q, k, v, o_m, l_m, cu, cu, causal, scale)
        grads_m = math_.backward(dout, q, k, v, o_m, l_m, cu, cu, causal, scale)
        for gf, gm in zip(grads_f, grads_m):
            assert (gf - gm).abs().max() < 5e-2
