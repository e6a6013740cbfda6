"""GPU presets and GPU files (cost_models.presets, cost_models.gpu_files)."""

from __future__ import annotations

import pytest

from dcpsim.cost_models import get_gpu
from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.gpu_files import gpu_from_mapping, load_gpu_file, resolve_gpu
from dcpsim.cost_models.presets import GPUS

FULL = """name = "my-gpu"
peak_bf16_tflops = 500.0
hbm_gb = 96
hbm_bw_gbs = 3000.0
nvlink_gbs = 200.0
network_gbs = 23.5
gpus_per_node = 8
nic_gbs = 25.0
"""


def test_presets_carry_their_published_numbers_and_sources():
    """Data-sheet figures (docs/models.md, 'GPUs and clusters'); h100/h200 unchanged from the first version."""
    want = {  # peak dense BF16 TFLOP/s, HBM GB, HBM GB/s, NVLink domain, GPUs per node, NICs per node
        "a100": (312.0, 80.0, 2039.0, 8, 8, 8), "h100": (989.0, 80.0, 3350.0, 8, 8, 8),
        "h200": (989.0, 141.0, 4800.0, 8, 8, 8), "b200": (2250.0, 180.0, 8000.0, 8, 8, 8),
        "gb200": (2500.0, 186.0, 8000.0, 72, 4, 4), "mi300x": (1307.4, 192.0, 5300.0, 8, 8, 8)}
    assert set(GPUS) == set(want)
    for name, (peak, hbm, bw, dom, gpn, nics) in want.items():
        g = get_gpu(name)
        assert (g.peak_bf16_tflops, g.hbm_gb, g.hbm_bw_gbs, g.nvlink_domain, g.gpus_per_node, g.nics_per_node) \
            == (peak, hbm, bw, dom, gpn, nics), name
        assert "data sheet" in g.source and g.network_gbs <= g.nic_gbs
    h100 = get_gpu("h100")
    assert (h100.nvlink_gbs, h100.network_gbs) == (370.0, 47.0)  # measured (nccl-tests)
    # Derived where nothing comparable is published: data-sheet rate x H100's measured efficiency.
    assert get_gpu("b200").nvlink_gbs == round(370 / 450 * 900, 1) == 740.0
    assert get_gpu("a100").network_gbs == round(47 / 50 * 25, 1) == 23.5
    assert get_gpu("mi300x").nvlink_gbs == 7 * 48  # AMD: 7 xGMI links, ~48 GB/s usable each
    assert get_gpu("gb200").nics_per_domain == 72


def test_a_full_gpu_file(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(FULL)
    g = load_gpu_file(f)
    assert (g.name, g.hbm_gb, g.nvlink_domain, g.nics_per_node, g.source) == ("my-gpu", 96, 8, 8, str(f))
    assert resolve_gpu(str(f)) == g


def test_a_file_on_top_of_a_preset(tmp_path):
    f = tmp_path / "nvl.toml"
    f.write_text('base = "h100"\nnvlink_domain = 256\n')
    g = resolve_gpu(str(f))
    assert (g.name, g.nvlink_domain, g.peak_bf16_tflops, g.gpus_per_node) == ("h100-custom", 256, 989.0, 8)
    assert "preset 'h100'" in g.source
    # A changed node size carries the defaulted domain and NIC count with it.
    g4 = gpu_from_mapping({"base": "h100", "gpus_per_node": 4}, "t")
    assert (g4.nvlink_domain, g4.nics_per_node) == (4, 4)


@pytest.mark.parametrize("text,needle", [
    ('base = "h100"\nnvlink_gb = 1\n', "unknown GPU field 'nvlink_gb'; valid: base, name"),
    (FULL.replace("peak_bf16_tflops = 500.0\n", ""), "GPU field 'peak_bf16_tflops' is missing"),
    (FULL.replace("hbm_gb = 96", 'hbm_gb = "lots"'), "gpu.hbm_gb = 'lots' is invalid: expected a finite number"),
    (FULL.replace("hbm_gb = 96", "hbm_gb = -1"), "gpu.hbm_gb = -1 is invalid: a positive finite number"),
    (FULL.replace("gpus_per_node = 8", "gpus_per_node = true"), "gpu.gpus_per_node = True is invalid: expected"),
    (FULL.replace("gpus_per_node = 8", "gpus_per_node = 8.5"), "gpu.gpus_per_node = 8.5 is invalid: expected an"),
    (FULL + "nvlink_domain = 12\n", "gpu.nvlink_domain = 12 is invalid: a multiple of gpu.gpus_per_node = 8"),
    (FULL + "nics_per_node = 0\n", "gpu.nics_per_node = 0 is invalid: a positive integer"),
    (FULL.replace("nic_gbs = 25.0", "nic_gbs = 20.0"), "gpu.network_gbs = 23.5 is invalid: at most the NIC"),
    ('base = "z100"\n', "gpu.base = 'z100' is invalid: expected a GPU preset, one of a100, b200, gb200"),
    ("peak_bf16_tflops = [1\n", "not valid TOML"),
])
def test_bad_gpu_files_are_one_line_naming_file_and_field(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(SpecError) as e:
        resolve_gpu(str(f))
    msg = str(e.value)
    assert needle in msg and str(f) in msg and "\n" not in msg


def test_missing_file_and_unknown_preset():
    with pytest.raises(SpecError, match="nope.toml: file not found; expected an existing GPU file"):
        resolve_gpu("nope.toml")
    with pytest.raises(SpecError, match="unknown GPU preset 'z100'; valid: a100, b200, gb200, h100, h200, mi300x"):
        resolve_gpu("z100")
