"""The scenarios and the sweep shipped for issue #12 load, are feasible, and carry their reasons."""

from __future__ import annotations

import numpy as np

from dcpsim.cost_models import moe
from dcpsim.experiments.scenario.files import SCENARIO_DIR, load_scenario
from dcpsim.experiments.sweep.grid import load_sweep

SWEEP = SCENARIO_DIR.parent / "sweeps" / "nvlink-domain.toml"


def test_scenarios_carry_a_comment_header_with_sources():
    for name in ("gb200-nvl72-qwen72b-256k", "h100-qwen3-moe-ep8-128k"):
        head = (SCENARIO_DIR / f"{name}.toml").read_text().split("description")[0]
        assert head.count("\n# ") >= 8 and "huggingface.co" in head and "Why:" in head


def test_gb200_dense_scenario_fits_the_context_in_its_pool():
    sc = load_scenario("gb200-nvl72-qwen72b-256k")
    job = sc.job()
    assert job.model.params_total > 70e9 and job.gpu.nvlink_domain == 72
    m = sc.cost_model().max_tokens_per_rank()
    assert sc.context_len / m <= 16 <= sc.pool  # a 256K document fits a power-of-two CP group of the pool


def test_moe_scenario_keeps_each_ep_group_inside_a_node():
    sc = load_scenario("h100-qwen3-moe-ep8-128k")
    job = sc.job()
    assert job.model.is_moe and job.ep == 8
    firsts = np.arange(0, job.pool, job.ep)
    assert not moe.ep_group_crosses(job, 0, firsts).any()
    assert sc.context_len / sc.cost_model().max_tokens_per_rank() <= sc.pool


def test_nvlink_domain_sweep_varies_only_the_domain():
    sw = load_sweep(str(SWEEP))
    assert sw.base.name == "gb200-nvl72-qwen72b-256k" and len(sw.grid["gpu"]) == 4
    domains = []
    for path in sw.grid["gpu"]:
        g = (
            load_scenario("gb200-nvl72-qwen72b-256k")
            .with_(gpu=str(SCENARIO_DIR.parent.parent / path))
            .job()
            .gpu
        )
        domains.append(g.nvlink_domain)
        assert (g.peak_bf16_tflops, g.hbm_gb, g.nvlink_gbs) == (2500.0, 186.0, 740.0)
    assert domains == [4, 8, 36, 72]
