"""MoE as Megatron-Core places it (cost_models.moe, cost_models.topology.expert_group_gpus): expert tensor
parallelism (--etp), EP groups in Megatron's expert rank order etp-ep-dp, the alltoall and flex dispatchers,
Megatron's layout rules; checked against hand calculations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dcpsim.cost_models import AnalyticCostModel, SpecError, moe
from dcpsim.cost_models.memory import model_state_parts
from dcpsim.cost_models.topology import expert_group_gpus
from dcpsim.experiments.cli import main
from tests.cost_models.test_moe import EXPERT, MODEL, job


def test_ep_groups_follow_megatrons_expert_order():
    # TP 4, EP 8 on 8-GPU H100 nodes: at ETP = TP (Megatron's default) the EP group is 8 pool ranks = 32 GPUs,
    # one TP-position-alike GPU of each: four nodes; at ETP = 1 it is 8 consecutive GPUs: one node.
    wide = job(ep=8, tp=4)
    assert expert_group_gpus(wide, 0, 0).tolist() == [[0, 4, 8, 12, 16, 20, 24, 28]]
    assert bool(moe.ep_group_crosses(wide, 0, np.array([0]))[0])
    assert moe.ep_local_members(wide, 0, np.array([0])).tolist() == [2.0]
    narrow = job(ep=8, tp=4).with_(etp=1)
    assert expert_group_gpus(narrow, 0, np.array([0, 1, 2, 5])).tolist() == [
        list(range(0, 8)), list(range(0, 8)), list(range(8, 16)), list(range(16, 24))]
    assert not moe.ep_group_crosses(narrow, 0, np.arange(16)).any()
    # ETP 2, EP 8: blocks of 16 GPUs, members 2 apart: 0, 2, .., 14 over two nodes, 4 in each
    mid = job(ep=8, tp=4).with_(etp=2)
    assert expert_group_gpus(mid, 0, 4).tolist() == [list(range(16, 32, 2))]
    assert moe.ep_local_members(mid, 0, np.array([4])).tolist() == [4.0]


def test_etp_equal_to_tp_prices_as_before():
    a = AnalyticCostModel(job(ep=4, tp=2))
    b = AnalyticCostModel(job(ep=4, tp=2).with_(etp=2))
    from tests.cost_models.test_moe import one_group
    ca, cb = a.group_costs(one_group(8192), 0), b.group_costs(one_group(8192), 0)
    assert ca.total_s == cb.total_s and ca.fwd_ep_comm_s == cb.fwd_ep_comm_s


def test_etp_shards_the_experts_and_gathers_over_etp():
    tp4 = job(ep=4, tp=4)
    e1 = tp4.with_(etp=1)
    # expert weights per GPU: P_e / (ETP · EP); rows per expert GEMM: ep · T · k / E · ETP / TP
    experts = MODEL.layers * MODEL.experts * EXPERT  # the dense part is the same in both
    w4, w1 = model_state_parts(tp4, 0)[0], model_state_parts(e1, 0)[0]
    assert w1 - w4 == pytest.approx(experts * 2.0 * (1 / 4 - 1 / 16))  # bf16 weights
    assert float(moe.tokens_per_expert(tp4, 1000.0)) == pytest.approx(4 * 1000 * 2 / 16)
    assert float(moe.tokens_per_expert(e1, 1000.0)) == pytest.approx(4 * 1000 * 2 / 16 / 4)
    # ETP = 1: no all-gather / reduce-scatter of the received tokens, and at EP 4 the group is 4 GPUs of a node
    cal = AnalyticCostModel(e1).cal
    T = 4096.0
    got = float(moe.ep_comm_layer_s(e1, cal, np.array([T]), np.array([False]))[0])
    nv = cal.link("all_to_all", "nvlink")
    buf = T * 2 * MODEL.hidden * 2 / 4  # T · k · h · 2 bytes / t
    assert got == pytest.approx(2 * (nv.base_s + 3 * nv.hop_s + buf * 3 / 4 / (nv.busbw_gbs * 1e9)))


def test_flex_dispatcher_sends_one_copy_per_destination_domain():
    # E = 16 experts, k = 2, EP 4 at TP = ETP = 4 on 8-GPU nodes: the EP group is GPUs 0, 4, 8, 12, two per node
    # (L = 2). A token misses the 8 experts of one node with C(8, 2) / C(16, 2) = 28 / 120.
    j = job(ep=4, tp=4).with_(moe_dispatcher="flex")
    p_node = 1 - math.comb(8, 2) / math.comb(16, 2)
    p_gpu = 1 - math.comb(12, 2) / math.comb(16, 2)
    assert float(moe.hit_probability(j, 2.0)[0]) == pytest.approx(p_node)
    counts = np.array([[2.0, 2.0]])
    remote, local = moe.flex_copies(j, counts)
    assert remote.tolist() == pytest.approx([p_node])  # vs alltoall's k · (ep − L) / ep = 1 copy
    assert local.tolist() == pytest.approx([p_gpu * (1 + p_node / p_node)])
    cm = AnalyticCostModel(j)
    cal, T, s = cm.cal, 8192.0, cm._p2p_bytes_scale()
    net, ag = cal.link("all_to_all", "network"), cal.link("all_gather", "nvlink")
    rs = cal.link("reduce_scatter", "nvlink")
    routed = T * 2 * MODEL.hidden * 2  # T · k · h · 2 bytes, gathered over ETP = TP
    etp_s = float(ag.seconds("all_gather", routed, 4) + rs.seconds("reduce_scatter", routed, 4))
    got = float(moe.ep_comm_layer_s(j, cal, np.array([T]), np.array([True]), s, np.array([2.0]), counts, True)[0])
    moved = T / 4 * MODEL.hidden * 2 * p_node  # one copy per token to the other node, bf16, the SP shard T / t
    want = 2 * (net.base_s + 3 * net.hop_s + s * moved / (net.busbw_gbs * 1e9)) + etp_s
    assert got == pytest.approx(want)
    alltoall = j.with_(moe_dispatcher="alltoall")
    got_a = float(moe.ep_comm_layer_s(alltoall, cal, np.array([T]), np.array([True]), s, np.array([2.0]), None,
                                      True)[0])
    moved_a = T / 4 * MODEL.hidden * 2 * (2 * 2 / 4)  # k · (ep − L) / ep copies per token
    assert got_a == pytest.approx(2 * (net.base_s + 3 * net.hop_s + s * moved_a / (net.busbw_gbs * 1e9)) + etp_s)


@pytest.mark.parametrize("changes,needle", [
    ({"etp": 3}, "job.etp = 3 is invalid: must divide gpu.nvlink_domain = 8"),
    ({"etp": 8, "pool": 1, "ep": 1}, "job.etp = 8 is invalid: a divisor of tp · pool = 1 (Megatron: ETP x EP"),
    ({"etp": 2, "ep": 16, "pool": 16}, "job.ep = 16 is invalid: must make etp · ep = 2 · 16 divide tp · pool = 16"),
    ({"moe_dispatcher": "deepep"}, "job.moe_dispatcher = 'deepep' is invalid: one of alltoall, flex"),
])
def test_bad_layouts_are_refused_with_megatrons_rule(changes, needle):
    base = dict(ep=1, pool=16)
    base.update({k: v for k, v in changes.items() if k in ("ep", "pool")})
    extra = {k: v for k, v in changes.items() if k not in ("ep", "pool")}
    with pytest.raises(SpecError, match=needle.replace("(", r"\(")):
        job(**base).with_(**extra)


def test_etp_must_divide_the_expert_ffn():
    from dataclasses import replace

    with pytest.raises(SpecError, match="job.etp = 8 is invalid: must divide model.expert_ffn = 100"):
        job().with_(model=replace(MODEL, expert_ffn=100), etp=8)


def test_cli_options_and_one_line_errors(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = "".join(capsys.readouterr().out.split())  # help text wraps lines at hyphens
    assert "--etpN" in out and "--moe-dispatcher{alltoall,flex}" in out
    assert "--expert-tensor-parallel-size" in out and "(default:=--tp,Megatron'sdefault)" in out
    assert "(defaultalltoall)" in out
    rc = main(["simulate", "--scenario", "h100-qwen3-moe-ep8-128k", "--etp", "3", "--no-progress"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(err) == 1 and "job.etp = 3 is invalid" in err[0]


def test_dcpsim_cost_shows_the_ep_layout_and_its_all_to_alls(capsys):
    import json

    base = ["cost", "--model", "qwen3-30b-a3b", "--seq-len", "16384", "--tp", "4", "--pool", "8", "--ep", "8",
            "--json"]
    rows = {}
    for extra in ([], ["--etp", "1"], ["--etp", "1", "--moe-dispatcher", "flex"]):
        assert main(base + extra) == 0
        r = json.loads(capsys.readouterr().out)
        rows[" ".join(extra)] = r
    assert rows[""]["etp"] == 4 and rows["--etp 1"]["etp"] == 1 and rows["--etp 1 --moe-dispatcher flex"][
        "moe_dispatcher"] == "flex"
    # ETP = TP = 4: the EP group spans four nodes; ETP 1: one node on NVLink; flex dedups copies inside it
    ep = {k: v["ep_comm_fwd_s"] for k, v in rows.items()}
    assert ep[""] > 5 * ep["--etp 1"] and ep["--etp 1"] > ep["--etp 1 --moe-dispatcher flex"] > 0
    assert rows[""]["ep_comm_bwd_s"] == pytest.approx(2 * ep[""])  # MoE recompute (default on) dispatches again


def test_cost_memory_takes_the_expert_layout(capsys):
    """``dcpsim cost --memory --ep E --etp T`` prints the breakdown of that layout: the routed experts' weights
    and gradients are split over ETP · EP GPUs, so EP 8 at ETP 1 holds less than EP 1, and the numbers are
    cost_models.memory's for the same job."""
    import json

    from dcpsim.cost_models import JobSpec, get_gpu, get_model
    from dcpsim.cost_models.memory import memory_breakdown

    def printed(*extra: str) -> list[dict]:
        assert main(["cost", "--memory", "--json", "--model", "qwen3-30b-a3b", "--seq-len", "8192", "--tp", "2",
                     "--pp", "2", "--pool", "8", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    wide, plain = printed("--ep", "8", "--etp", "1"), printed()
    job = JobSpec(model=get_model("qwen3-30b-a3b"), gpu=get_gpu("h100"), tp=2, pp=2, pool=8, context_len=8192,
                  ep=8, etp=1)
    for s, printed_stage in enumerate(wide):
        want = memory_breakdown(job, s, 8192.0).to_dict()
        assert {k: printed_stage[k] for k in want} == want
    assert all(w["weights_gb"] < p["weights_gb"] / 3 for w, p in zip(wide, plain))
