"""The DistCA and Megatron-LM importers reproduce the placement their sources describe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcpsim.experiments.replay.distca import import_distca, pad_to_cp, wlbllm_rebalance
from dcpsim.experiments.replay.megatron import import_megatron, model_args
from dcpsim.experiments.replay.runlog import LogError
from tests.replay.conftest import DISTCA, MEASURED, SMALL_FILE


def test_distca_baseline_rank_r_runs_lists_r_and_r_plus_dp() -> None:
    raw = json.loads(SMALL_FILE.read_text())
    log = import_distca(SMALL_FILE)
    assert log.job["dp"] == 2 and log.job["tp"] == 8 and log.job["layers"] == 4 and log.pool == 2
    for s, it in zip(raw["samples"], log.iterations):
        lists = s["samples"]
        (mb,) = it.microbatches
        assert [g.ranks for g in mb] == [(0,), (1,)]
        assert mb[0].docs == tuple(lists[0] + lists[2]) and mb[1].docs == tuple(lists[1] + lists[3])
        assert it.measured_s == pytest.approx(s["duration_ms"] / 1e3)


def test_wlbllm_rebalance_by_hand() -> None:
    # Lmax = 100 · 2 · 2 / 2 = 200. 120 → replica 0; 90 → replica 1 (least workload); 60 → replica 1 (its
    # workload is smaller: 90 < 120 in (l/64K) units); 50 → replica 0 (120 + 50 ≤ 200; replica 1 has 150).
    assert wlbllm_rebalance([[120, 50], [90], [60], []], dp=2, num_tokens=100) == [[120, 50], [90, 60]]


def test_wlbllm_keeps_every_document_once_and_pads_to_cp() -> None:
    lists = [[70000, 3000], [50000, 12000, 3536], [65536], [30000, 35536]]
    out = wlbllm_rebalance(lists, dp=2, num_tokens=65536)
    assert sorted(x for r in out for x in r) == sorted(x for lst in lists for x in lst)
    assert pad_to_cp([100, 7], cp=2) == [100, 28] and sum(pad_to_cp([100, 7], cp=2)) % 32 == 0


def test_wlbllm_file_places_all_documents() -> None:
    f = DISTCA / "w_d2_vs_base_wlb.128.6040_benchmark.20250819_122919.wlbllm.json"
    raw = json.loads(f.read_text())
    log = import_distca(f)
    assert log.meta["mode"] == "wlbllm" and log.job["cp"] == 1
    for s, it in zip(raw["samples"], log.iterations):
        placed = sorted(d for g in it.microbatches[0] for d in g.docs)
        docs = sorted(d for lst in s["samples"] for d in lst)
        assert len(placed) == len(docs) and sum(placed) - sum(docs) < 16 * len(it.microbatches[0])


def test_distca_d2_mode_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "d2.json"
    p.write_text(json.dumps({"config": {"mode": "d2", "tp_size": 8, "dp_size": 2, "num_tokens": 1,
                                        "num_layers": 4}, "samples": []}))
    with pytest.raises(LogError, match="config.mode = 'd2'"):
        import_distca(p)


def test_megatron_golden_values() -> None:
    case = MEASURED / "megatron" / "gpt3_345m_nightly_dgx_a100_1N8G_mcore_tp1_pp2"
    log = import_megatron(case / "golden_values_dev_dgx_h100.json")
    assert (log.job["tp"], log.job["pp"], log.job["dp"]) == (1, 2, 4)
    m = log.job["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["ffn"], m["vocab"]) == (12, 512, 8, 2048, 50304)
    assert [it.step for it in log.iterations] == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50]  # step 1 dropped
    it = log.iterations[0]
    assert it.measured_s == pytest.approx(0.10355)
    assert len(it.microbatches) == 2 and it.microbatches[0][3].docs == (1024,) * 4  # 32 / (4 · 4)


def test_model_args_reads_only_model_args() -> None:
    text = "ENV_VARS:\n  --x: 1\nMODEL_ARGS:\n  --num-layers: 12 # c\n  --bf16: true\nTEST_TYPE: regular\n"
    assert model_args(text) == {"num-layers": "12", "bf16": "true"}
