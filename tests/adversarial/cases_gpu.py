"""GPU files (``--gpu FILE.toml``): every field is checked for type, finiteness, the int64 range and its own
range; the file is a regular UTF-8 file of bounded nesting."""

from __future__ import annotations

from tests.adversarial.corpus import DIRECTORY, FIFO, Case

DEEP = "a = " + "[" * 2000 + "]" * 2000 + "\n"


def gpu(name: str, content: object, expect: str, *, sub: bool = False) -> Case:
    argv = ("cost", "--model", "llama3-8b", "--gpu", name, "--seq-len", "4096")
    return Case(f"gpu-{name}", argv, expect, files={name: content}, subprocess=sub)


def on_h100(name: str, line: str, expect: str) -> Case:
    return gpu(name, f'base = "h100"\n{line}\n', expect)


CASES = [
    on_h100("nan.toml", "hbm_gb = nan", "nan.toml: gpu.hbm_gb = nan is invalid: expected a finite number"),
    on_h100("inf.toml", "nvlink_gbs = inf", "gpu.nvlink_gbs = inf is invalid: expected a finite number"),
    on_h100("neg.toml", "hbm_gb = -1", "gpu.hbm_gb = -1 is invalid: a positive finite number"),
    on_h100("zero_peak.toml", "peak_bf16_tflops = 0", "gpu.peak_bf16_tflops = 0 is invalid"),
    on_h100("zero_bw.toml", "hbm_bw_gbs = 0.0", "gpu.hbm_bw_gbs = 0.0 is invalid"),
    on_h100("string.toml", 'hbm_gb = "80"', "gpu.hbm_gb = '80' is invalid: expected a finite number"),
    on_h100("bool.toml", "gpus_per_node = true", "gpu.gpus_per_node = True is invalid: expected an integer"),
    on_h100("frac.toml", "gpus_per_node = 8.5", "gpu.gpus_per_node = 8.5 is invalid: expected an integer"),
    on_h100("big.toml", "nics_per_node = 99999999999999999999", "outside the int64 range"),
    on_h100("list.toml", "hbm_gb = [80]", "gpu.hbm_gb = [80] is invalid"),
    on_h100("table.toml", "[hbm_gb]\nx = 1", "gpu.hbm_gb = {'x': 1} is invalid"),
    on_h100("typo.toml", "hbm_gbb = 80", "unknown GPU field 'hbm_gbb'; valid: base, name"),
    on_h100("nic.toml", "nic_gbs = 1.0", "gpu.network_gbs = "),
    on_h100("domain.toml", "nvlink_domain = 12", "gpu.nvlink_domain = 12 is invalid: a multiple of"),
    gpu("base.toml", 'base = "z100"\n', "gpu.base = 'z100' is invalid: expected a GPU preset"),
    gpu("missing.toml", "hbm_gb = 80\n", "GPU field 'peak_bf16_tflops' is missing"),
    gpu("syntax.toml", "hbm_gb = [1\n", "not valid TOML"),
    gpu("latin1.toml", b'base = "h100"\nname = "\xe9"\n', "byte b'\\xe9' is not UTF-8"),
    gpu("deep.toml", DEEP, "nested too deeply"),
    gpu("dir.toml", DIRECTORY, "is a directory, not a regular file; expected a GPU file"),
    gpu("pipe.toml", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
    Case("gpu-absent", ("cost", "--model", "llama3-8b", "--gpu", "nope.toml", "--seq-len", "4096"),
         "nope.toml: file not found; expected an existing GPU file"),
]
