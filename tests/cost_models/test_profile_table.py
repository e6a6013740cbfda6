"""The profile-table schema: reading, validation (errors name file, row, field and value), writing, the FLOP
convention, and the shipped profile's provenance (regenerated from the copied reference tables)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dcpsim.cost_models.data import build_defaults
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.profile_table import (
    COLUMNS,
    REQUIRED_COLUMNS,
    attention_pairs,
    read_profile,
    row_flops,
    row_size,
    row_tflops,
    write_profile,
)

DATA = Path(build_defaults.__file__).parent
SHIPPED = DATA / "profile_h100.csv"
PUBLISHED = build_defaults.REFERENCE / "h100_attention_tflops_published.csv"
HEADER = ",".join(COLUMNS)
ATT = "attn_fwd,fa3,4096,4096,4,16,16,128,1,,,,,,,h100,{t},paper"
# op,kernel,q_len,kv_len,batch,heads,kv_heads,head_dim,causal,tokens,in_features,out_features,...
LAYER = "layer_fwd,math,{q},,,4,2,32,{causal},256,128,384,,,,cpu,{t},profiler"
NCCL = "all_gather,,,,,,,,,,,,8388608,2,{link},h100,{t},nccl-tests"


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    p = tmp_path / "prof.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_shipped_profile_reads_and_round_trips(tmp_path):
    df = read_profile(SHIPPED)
    assert list(df.columns) == list(COLUMNS)
    assert set(df["op"]) == {"attn_fwd", "attn_bwd", "attn_fwd_bwd", "all_gather", "all_reduce", "reduce_scatter"}
    write_profile(df, tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_text() == SHIPPED.read_text()


def test_shipped_profile_is_the_conversion_of_the_copied_reference_tables():
    att = build_defaults.convert_published_attention(PUBLISHED)
    cudnn = build_defaults.convert_cudnn_h200(build_defaults.REFERENCE / "h200_cudnn_sdpa_llama31.csv")
    nccl = build_defaults.convert_nccl(build_defaults.REFERENCE / "nccl_h100x8_intranode.csv")
    shipped = read_profile(SHIPPED)
    pd.testing.assert_frame_equal(pd.concat([att, cudnn, nccl], ignore_index=True), shipped)


def test_converted_attention_recovers_the_published_tflops():
    """TFLOP/s → seconds → TFLOP/s with the FA papers' FLOP count (causal half, backward 2.5x, fwd+bwd 3.5x)
    is exact."""
    src = pd.read_csv(PUBLISHED)
    df = build_defaults.convert_published_attention(PUBLISHED)
    np.testing.assert_allclose(row_tflops(df), src["tflops"], rtol=1e-5)
    assert (df["heads"] * df["head_dim"] == 2048).all() and (df["batch"] * df["q_len"] == 16384).all()


def test_nccl_rows_keep_the_out_of_place_time():
    src = pd.read_csv(build_defaults.REFERENCE / "nccl_h100x8_intranode.csv")
    df = build_defaults.convert_nccl(build_defaults.REFERENCE / "nccl_h100x8_intranode.csv")
    np.testing.assert_allclose(df["seconds"], src["t_us_out"] * 1e-6, rtol=1e-12)
    assert (df["link"] == "nvlink").all() and (df["bytes"].to_numpy() == src["size_bytes"].to_numpy()).all()


def test_flop_convention():
    assert attention_pairs(1000, 1000, 1) == pytest.approx(1000**2 / 2)
    assert attention_pairs(1000, 1000, 0) == pytest.approx(1000**2)
    assert attention_pairs(100, 1000, 1) == pytest.approx(100 * 1000 - 100**2 / 2)  # bottom-right aligned
    df = read_profile(SHIPPED)
    fwd = df[(df["op"] == "attn_fwd") & (df["causal"] == 1)].iloc[:1]
    L, d, a, b = (int(fwd[c].iloc[0]) for c in ("q_len", "head_dim", "heads", "batch"))
    assert row_flops(fwd)[0] == pytest.approx(2 * L * L * d * a * b)  # = cost_models.flops (causal)
    assert row_size(fwd)[0] == L
    bwd = fwd.assign(op="attn_bwd")
    assert row_flops(bwd)[0] == pytest.approx(2.5 * row_flops(fwd)[0])


def test_optional_columns_and_defaults(tmp_path):
    header = ",".join(c for c in COLUMNS if c not in ("kernel", "batch"))
    p = write(tmp_path, "attn_fwd,4096,4096,16,,128,1,,,,,,,h100,0.001,me", header=header)
    df = read_profile(p)
    assert df["batch"].iloc[0] == 1 and df["kv_heads"].iloc[0] == 16 and df["kernel"].iloc[0] == ""


@pytest.mark.parametrize("row, needle", [
    (ATT.format(t="-0.001"), "row 2: seconds = '-0.001'"),
    (ATT.format(t="0"), "row 2: seconds = '0'"),
    (ATT.format(t="nan"), "row 2: seconds = 'nan'"),
    (ATT.format(t=""), "row 2: seconds = ''"),
    (ATT.format(t="inf"), "row 2: seconds = 'inf'"),
    ("attn_fwdd,fa3,4096,4096,4,16,16,128,1,,,,,,,h100,0.001,paper", "row 2: op = 'attn_fwdd'"),
    ("attn_fwd,fa3,,4096,4,16,16,128,1,,,,,,,h100,0.001,paper", "row 2: q_len = ''"),
    ("attn_fwd,fa3,4096,4096,4,16,16,128,2,,,,,,,h100,0.001,paper", "row 2: causal = '2'"),
    ("attn_fwd,fa3,4096.5,4096,4,16,16,128,1,,,,,,,h100,0.001,paper", "row 2: q_len = '4096.5'"),
    ("attn_fwd,fa3,-4096,4096,4,16,16,128,1,,,,,,,h100,0.001,paper", "row 2: q_len = '-4096'"),
    (NCCL.format(link="infiniband", t="1e-5"), "row 2: link = 'infiniband'"),
    ("all_gather,,,,,,,,,,,,8388608,1,nvlink,h100,1e-5,x", "row 2: group_size = '1'"),
    ("all_gather,,,,,,,,,,,,,2,nvlink,h100,1e-5,x", "row 2: bytes = ''"),
    ("gemm,,,,,,,,,4096,4096,,,,,h100,1e-3,x", "row 2: out_features = ''"),
    (LAYER.format(q="", causal="", t="-1e-3"), "row 2: seconds = '-1e-3'"),
    (LAYER.format(q="128", causal="", t="1e-3"), "row 2: q_len = '128'"),
    (LAYER.format(q="", causal="0", t="1e-3"), "row 2: causal = '0'"),
    ("layer_bwd,math,,,,4,2,32,,256,,384,,,,cpu,1e-3,x", "row 2: in_features = ''"),
    ("layer_bwd,math,,,,,,32,,256,128,384,,,,cpu,1e-3,x", "row 2: heads = ''"),
    ("layer_bwd,math,,,,4,3,32,,256,128,384,,,,cpu,1e-3,x", "row 2: kv_heads = '3'"),
])
def test_bad_rows_are_rejected_naming_file_row_and_value(tmp_path, row, needle):
    p = write(tmp_path, ATT.format(t="0.001"), row)
    with pytest.raises(CalibrationError) as e:
        read_profile(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_layer_rows_default_to_one_causal_document_of_tokens(tmp_path):
    p = write(tmp_path, LAYER.format(q="", causal="", t="2e-3"), LAYER.format(q="256", causal="1", t="3e-3"))
    df = read_profile(p)
    assert list(df["q_len"]) == [256, 256] and list(df["kv_len"]) == [256, 256]
    assert list(df["causal"]) == [1, 1] and list(df["batch"]) == [1, 1] and list(df["kv_heads"]) == [2, 2]
    assert np.isnan(row_flops(df)).all()


def test_missing_column_is_named(tmp_path):
    header = HEADER.replace(",seconds", "")
    p = write(tmp_path, "attn_fwd,fa3,4096,4096,4,16,16,128,1,,,,,,,h100,paper", header=header)
    with pytest.raises(CalibrationError, match=r"missing column\(s\) seconds") as e:
        read_profile(p)
    assert str(p) in str(e.value)


def test_unreadable_or_empty_files(tmp_path):
    with pytest.raises(CalibrationError, match="file not found"):
        read_profile(tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(CalibrationError, match="not a CSV profile table"):
        read_profile(empty)
    with pytest.raises(CalibrationError, match="no rows"):
        read_profile(write(tmp_path))


def test_write_profile_validates_and_fills_optional_columns(tmp_path):
    row = {"op": "all_reduce", "bytes": 1 << 20, "group_size": 8, "link": "network", "seconds": 2.5e-4}
    df = pd.DataFrame([{c: "" for c in REQUIRED_COLUMNS} | row])
    write_profile(df, tmp_path / "p.csv")
    back = read_profile(tmp_path / "p.csv")
    assert back["bytes"].iloc[0] == 1 << 20 and back["seconds"].iloc[0] == 2.5e-4
    with pytest.raises(CalibrationError, match="row 1: seconds"):
        write_profile(df.assign(seconds=-1.0), tmp_path / "bad.csv")


def test_cudnn_rows_keep_the_measured_times_and_tflops():
    """cudnn-frontend H200 table: seconds = ms / 1000, and the table's own TFLOP/s (non-masked FLOPs,
    backward 2.5x) come back within its 3-digit rounding."""
    path = build_defaults.REFERENCE / "h200_cudnn_sdpa_llama31.csv"
    src = pd.read_csv(path)
    df = build_defaults.convert_cudnn_h200(path)
    fwd, bwd = df[df["op"] == "attn_fwd"], df[df["op"] == "attn_bwd"]
    np.testing.assert_allclose(fwd["seconds"], src["fwd_ms"] / 1e3, rtol=1e-5)
    np.testing.assert_allclose(bwd["seconds"], src["bwd_ms"] / 1e3, rtol=1e-5)
    np.testing.assert_allclose(row_tflops(fwd), src["fwd_tflops"], rtol=0.01)
    np.testing.assert_allclose(row_tflops(bwd), src["bwd_tflops"], rtol=0.01)
