"""Profile tables: measured kernel and collective times; one CSV schema for shipped defaults and profilers.

One row is one measurement of one operation. Columns (in this order when written):

=============== ======================================================================================
``op``          attn_fwd, attn_bwd, attn_fwd_bwd (forward + backward timed together), gemm, layer_fwd,
                layer_bwd, all_to_all, send_recv, all_gather, reduce_scatter, all_reduce
``kernel``      optional: which implementation (``fa3``, ``fa2``, ``cudnn9.1``, ...); empty = unnamed
``q_len``       attention: query tokens per sequence
``kv_len``      attention: key/value tokens per sequence
``batch``       optional, attention: sequences of that shape in the call (empty = 1)
``heads``       attention: query heads
``kv_heads``    attention: key/value heads (empty = ``heads``; does not enter the FLOP count)
``head_dim``    attention: head dimension d
``causal``      attention: 1 causal (bottom-right aligned mask), 0 full
``tokens``      gemm: rows of the activation matrix (M); layer: tokens of the one causal document
``in_features`` gemm: K; layer: hidden size h
``out_features`` gemm: N; layer: SwiGLU intermediate size f
``bytes``       collectives: the nccl-tests buffer size (total size; see cost_models.calibration)
``group_size``  collectives: ranks taking part (≥ 2; send_recv: 2)
``link``        collectives: ``nvlink`` (inside a node) or ``network`` (across nodes)
``device``      the GPU kind, e.g. ``h100`` (may be empty)
``seconds``     measured time of the call, > 0
``source``      where the number comes from (a paper, a profiler run, ...)
=============== ======================================================================================

``layer_fwd`` / ``layer_bwd`` time one whole decoder layer (norms, QKV/O projections, RoPE, attention,
SwiGLU MLP, residuals), forward alone or backward alone, on one rank over one causal document of ``tokens``
tokens. They need ``tokens``, ``in_features`` (= h), ``out_features`` (= f), ``heads``, ``head_dim``;
``kv_heads`` defaults to ``heads``, ``q_len`` and ``kv_len`` to ``tokens`` (if given they must equal it),
``causal`` to 1 (the only value allowed), ``batch`` to 1 (the only value allowed).

``ring_fwd`` / ``ring_bwd`` time one layer's ring CP attention (TransformerEngine p2p, dual-chunk) on one
rank of a ring of ``group_size`` ranks, forward alone or backward alone, over one causal document of
``tokens`` tokens (the whole document; each rank holds tokens / group_size), with ``heads``, ``kv_heads``
(default ``heads``), ``head_dim`` and ``link`` (``nvlink``). The fitter subtracts the analytic model's
attention and exposed transfer time and keeps the rest, per ring step beyond the first, as the fixed
per-step cost.

Fields an op does not use may be empty. FLOP conventions (those of the FlashAttention papers and of
:mod:`cost_models.flops`): attention forward = 4·d·a·P FLOPs per sequence, P the (query, key) pairs computed:
q·kv without mask, kv·m − m²/2 with m = min(q, kv) under a causal mask (L²/2 when q = kv = L); backward =
2.5x forward; attn_fwd_bwd = 3.5x forward; GEMM = 2·M·K·N.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dcpsim.cost_models.calibration import COLLECTIVES, LINKS
from dcpsim.cost_models.errors import CalibrationError
from dcpsim.cost_models.flops import ATTENTION_BWD_FACTOR
from dcpsim.userfile import read_text

ATTENTION_OPS = ("attn_fwd", "attn_bwd")
FWD_BWD_OP = "attn_fwd_bwd"  # forward + backward of one call timed together (the FlashAttention-2 paper's figures)
ALL_ATTENTION_OPS = ATTENTION_OPS + (FWD_BWD_OP,)
LAYER_OPS = ("layer_fwd", "layer_bwd")
RING_OPS = ("ring_fwd", "ring_bwd")  # one layer's ring CP attention on one rank (attention + its transfers)
COMPUTE_OPS = ALL_ATTENTION_OPS + ("gemm",) + LAYER_OPS + RING_OPS
OPS = COMPUTE_OPS + COLLECTIVES
INT_FIELDS = ("q_len", "kv_len", "batch", "heads", "kv_heads", "head_dim", "causal", "tokens", "in_features",
              "out_features", "bytes", "group_size")
COLUMNS = ("op", "kernel", "q_len", "kv_len", "batch", "heads", "kv_heads", "head_dim", "causal", "tokens",
           "in_features", "out_features", "bytes", "group_size", "link", "device", "seconds", "source")
OPTIONAL_COLUMNS = ("kernel", "batch")
REQUIRED_COLUMNS = tuple(c for c in COLUMNS if c not in OPTIONAL_COLUMNS)
NEEDS: dict[str, tuple[str, ...]] = {
    **{op: ("q_len", "kv_len", "heads", "head_dim", "causal") for op in ALL_ATTENTION_OPS},
    "gemm": ("tokens", "in_features", "out_features"),
    **{op: ("tokens", "in_features", "out_features", "heads", "head_dim") for op in LAYER_OPS},
    **{op: ("tokens", "heads", "head_dim", "group_size", "link") for op in RING_OPS},
    **{op: ("bytes", "group_size", "link") for op in COLLECTIVES},
}


def _fail(origin: str, row: int, field: str, value: str, valid: str) -> CalibrationError:
    return CalibrationError(f"{origin}: row {row}: {field} = {value!r} is invalid: {valid}")


def _parse_int(text: str, origin: str, row: int, field: str) -> int | None:
    if text == "":
        return None
    try:
        f = float(text)
    except ValueError:
        raise _fail(origin, row, field, text, "expected an integer") from None
    if not math.isfinite(f) or f != int(f):
        raise _fail(origin, row, field, text, "expected an integer")
    v = int(f)
    if field == "causal":
        if v not in (0, 1):
            raise _fail(origin, row, field, text, "expected 0 (full) or 1 (causal)")
    elif v < 1:
        raise _fail(origin, row, field, text, "expected a positive integer")
    return v


def _check_layer(ints: dict[str, int | None], rec: dict[str, str], origin: str, row: int) -> None:
    """Fill a layer row's defaults (q_len = kv_len = tokens, causal 1, batch 1) and check the given ones."""
    n = ints["tokens"]
    for f, want in (("q_len", n), ("kv_len", n), ("causal", 1), ("batch", 1)):
        if ints[f] is None:
            ints[f] = want
        elif ints[f] != want:
            raise _fail(origin, row, f, rec.get(f, ""), f"a {rec['op']} row times one causal document of "
                                                        f"tokens = {n} tokens: {f} must be empty or {want}")
    if ints["heads"] % ints["kv_heads"]:  # type: ignore[operator]  # NEEDS[op] made both non-empty
        raise _fail(origin, row, "kv_heads", rec["kv_heads"], f"must divide heads = {ints['heads']}")


def validate_profile(raw: pd.DataFrame, origin: str = "profile") -> pd.DataFrame:
    """Check and type a profile read as strings; CalibrationError names ``origin``, the 1-based data row, the
    field and the value. Returns typed columns: integers as nullable ``Int64``, ``seconds`` as float64."""
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        raise CalibrationError(f"{origin}: missing column(s) {', '.join(missing)}; a profile table has "
                               f"columns {', '.join(COLUMNS)} ({', '.join(OPTIONAL_COLUMNS)} optional)")
    if raw.empty:
        raise CalibrationError(f"{origin}: the profile table has no rows")
    raw = raw.fillna("").astype(str).apply(lambda s: s.str.strip())
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for i, rec in enumerate(raw.to_dict("records"), start=1):
        op = rec["op"]
        if op not in OPS:
            raise _fail(origin, i, "op", op, f"expected one of {', '.join(OPS)}")
        ints = {f: _parse_int(rec.get(f, ""), origin, i, f) for f in INT_FIELDS}
        for f in NEEDS[op]:
            if f != "link" and ints[f] is None:
                raise _fail(origin, i, f, "", f"op {op} needs {', '.join(NEEDS[op])}")
        link = rec["link"]
        if op in COLLECTIVES or op in RING_OPS:
            if link not in LINKS:
                raise _fail(origin, i, "link", link, f"op {op} needs a link: {' or '.join(LINKS)}")
            if ints["group_size"] < 2:  # type: ignore[operator]  # NEEDS[op] made it non-empty
                raise _fail(origin, i, "group_size", rec["group_size"], "a collective needs ≥ 2 ranks")
        try:
            sec = float(rec["seconds"])
        except ValueError:
            sec = math.nan
        if not (math.isfinite(sec) and sec > 0):
            raise _fail(origin, i, "seconds", rec["seconds"], "expected a positive, finite time in seconds")
        if op in ALL_ATTENTION_OPS + LAYER_OPS + RING_OPS and ints["kv_heads"] is None:
            ints["kv_heads"] = ints["heads"]
        if op in ALL_ATTENTION_OPS and ints["batch"] is None:
            ints["batch"] = 1
        if op in LAYER_OPS:
            _check_layer(ints, rec, origin, i)
        for f in INT_FIELDS:
            cols[f].append(ints[f])
        for f in ("op", "kernel", "device", "source"):
            cols[f].append(rec.get(f, ""))
        cols["link"].append(link)
        cols["seconds"].append(sec)
    df = pd.DataFrame({c: cols[c] for c in COLUMNS})
    for f in INT_FIELDS:
        df[f] = pd.array(cols[f], dtype="Int64")
    df["seconds"] = df["seconds"].astype(np.float64)
    return df


def read_profile(path: str | Path) -> pd.DataFrame:
    """Read and validate one profile CSV (see the module docstring)."""
    p = Path(path)
    text = read_text(p, "profile table (CSV)", error=CalibrationError)
    try:
        raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise CalibrationError(f"{p}: not a CSV profile table ({str(e).strip()})") from None
    return validate_profile(raw, origin=str(p))


def read_profiles(paths: list[str | Path]) -> pd.DataFrame:
    """Read several profile tables into one (rows in file order)."""
    return pd.concat([read_profile(p) for p in paths], ignore_index=True)


def write_profile(df: pd.DataFrame, path: str | Path) -> None:
    """Write ``df`` as a profile CSV with every column in schema order (validated first)."""
    df = df.copy()
    for c in OPTIONAL_COLUMNS:
        if c not in df.columns:
            df[c] = ""
    text = df[list(COLUMNS)].astype(object).where(df[list(COLUMNS)].notna(), "").astype(str)
    checked = validate_profile(text, origin=str(path))
    out = checked.astype(object).where(checked.notna(), "")
    out["seconds"] = [repr(float(s)) for s in checked["seconds"]]
    out.to_csv(path, index=False, lineterminator="\n")


# ---- FLOPs and sizes of profile rows (vectorised over a validated table) ----------------------------------
def _f(df: pd.DataFrame, col: str) -> np.ndarray:
    return df[col].to_numpy(dtype=np.float64, na_value=np.nan)


def attention_pairs(q_len: np.ndarray, kv_len: np.ndarray, causal: np.ndarray) -> np.ndarray:
    """(query, key) pairs computed per sequence and head: q·kv, or kv·m − m²/2 (m = min(q, kv)) causal."""
    q, kv = np.asarray(q_len, dtype=np.float64), np.asarray(kv_len, dtype=np.float64)
    m = np.minimum(q, kv)
    return np.where(np.asarray(causal) == 1, kv * m - m * m / 2.0, q * kv)


def row_flops(df: pd.DataFrame) -> np.ndarray:
    """FLOPs of each row's call (NaN for collectives): attention 4·d·a·pairs·batch (x2.5 backward), GEMM
    2·M·K·N; NaN for layer rows (their kernel time comes from the analytic model, cost_models.fitting)."""
    op = df["op"].to_numpy()
    att = 4.0 * _f(df, "head_dim") * _f(df, "heads") * _f(df, "batch") * attention_pairs(
        _f(df, "q_len"), _f(df, "kv_len"), _f(df, "causal"))
    factor = np.where(op == "attn_bwd", ATTENTION_BWD_FACTOR, np.where(op == FWD_BWD_OP, 1 + ATTENTION_BWD_FACTOR, 1.0))
    att = factor * att
    gemm = 2.0 * _f(df, "tokens") * _f(df, "in_features") * _f(df, "out_features")
    return np.where(np.isin(op, ALL_ATTENTION_OPS), att, np.where(op == "gemm", gemm, np.nan))


def row_size(df: pd.DataFrame) -> np.ndarray:
    """The size the efficiency curves are indexed by: attention block length √(q·kv) tokens (= L when
    q = kv = L, the analytic model's block), GEMM tokens; NaN for collectives."""
    op = df["op"].to_numpy()
    att = np.sqrt(_f(df, "q_len") * _f(df, "kv_len"))
    return np.where(np.isin(op, ALL_ATTENTION_OPS), att, np.where(op == "gemm", _f(df, "tokens"), np.nan))


def row_tflops(df: pd.DataFrame) -> np.ndarray:
    """Achieved TFLOP/s of each attention or GEMM row (NaN for layers and collectives)."""
    return row_flops(df) / (df["seconds"].to_numpy(dtype=np.float64) * 1e12)
