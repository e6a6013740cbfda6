"""Reading a file a user named, safely: a regular file, within a size cap, UTF-8, and JSON/TOML nested no
deeper than a limit. Every failure is one line naming the file and what was wrong, raised as the caller's own
error class (``error=``: ``TraceError`` in traces, ``SpecError`` or ``CalibrationError`` in cost_models, ...),
so the command line prints it as one line and exits 2 without this module knowing the families.

This module is at the bottom of the import table (docs/architecture.md): it imports nothing of the project,
and every package may import it.

- :func:`open_regular` refuses what is not a regular file *before* reading: a missing path, a directory, a
  FIFO (which would block forever), a device or a socket. It opens with ``O_NONBLOCK`` and checks the opened
  file again (``fstat``), so a path swapped for a FIFO between the check and the open cannot block either.
- :func:`read_bytes` / :func:`read_text` add the size cap and the UTF-8 decode (the message gives the line and
  column of the first bad byte).
- :func:`load_json` / :func:`load_toml` add the nesting-depth limit (a deeply nested document would otherwise
  end in ``RecursionError``) and the parser's own errors as one line.
- :func:`check_number` is the one check of a number read from a user (a file's value, an option): type,
  finiteness, the int64 range and the caller's bounds, as one line naming the file, the key, the value and
  what is valid.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

__all__ = ["INT64_MAX", "MAX_BYTES", "MAX_DEPTH", "UserFileError", "check_number", "check_regular", "load_json",
           "load_toml", "open_regular", "read_bytes", "read_text"]

MAX_BYTES = 1 << 30  # 1 GiB: far above any trace, model, GPU or calibration file; a cap, not a working size
MAX_DEPTH = 64  # nesting levels of lists/objects/tables; the project's files use at most 4


class UserFileError(ValueError):
    """The default error class, for callers without a family of their own."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | os.PathLike[str], what: str = "file", *,
                  error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES) -> Path:
    """``path`` as a Path if it names an existing regular file of at most ``max_bytes`` bytes (symlinks
    followed), else ``error("<path>: <what> ...")``. Nothing is opened, so a FIFO cannot block."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(f"{p}: file not found; expected an existing {what}") from None
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror or exc}); expected a readable {what}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p}: is {_kind(st.st_mode)}, not a regular file; expected a {what}")
    if st.st_size > max_bytes:
        raise error(f"{p}: {st.st_size:,} bytes, over the limit of {max_bytes:,} bytes for a {what}")
    return p


def open_regular(path: str | os.PathLike[str], what: str = "file", *,
                 error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES) -> int:
    """A read-only OS file descriptor of the regular file ``path`` (the checks of :func:`check_regular`,
    repeated on the opened file). The caller closes it."""
    p = check_regular(path, what, error=error, max_bytes=max_bytes)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise error(f"{p}: cannot open ({exc.strerror or exc}); expected a readable {what}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        check_regular(p, what, error=error, max_bytes=max_bytes)  # raises: the path changed under us
        raise error(f"{p}: changed while it was opened; expected a regular {what}")
    return fd


def read_bytes(path: str | os.PathLike[str], what: str = "file", *,
               error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``)."""
    fd = open_regular(path, what, error=error, max_bytes=max_bytes)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"{path}: over the limit of {max_bytes:,} bytes for a {what}")
    return data


def decode_utf8(data: bytes, source: str, what: str = "file", *,
                error: type[Exception] = UserFileError) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped), or one line giving the first bad byte's
    line, column and value."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = data[exc.start:exc.start + 1]
        raise error(f"{source}: line {line}, column {column}: byte {bad!r} is not UTF-8 ({exc.reason}); "
                    f"expected a UTF-8 text {what}") from None


def read_text(path: str | os.PathLike[str], what: str = "file", *,
              error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES) -> str:
    """The text of the regular file ``path``, decoded as UTF-8 (see :func:`decode_utf8`)."""
    return decode_utf8(read_bytes(path, what, error=error, max_bytes=max_bytes), str(path), what, error=error)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in a JSON text, brackets inside strings not counted (one pass, no
    recursion: safe on any input)."""
    import numpy as np

    code = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8"), dtype=np.uint8)
    step = np.zeros(code.size, dtype=np.int64)
    step[(code == ord("[")) | (code == ord("{"))] = 1
    step[(code == ord("]")) | (code == ord("}"))] = -1
    return int(np.cumsum(step).max(initial=0))


def _too_deep(source: str, depth: int, max_depth: int, what: str) -> str:
    return f"{source}: nested {depth} levels deep, over the limit of {max_depth}; expected a flatter {what}"


def load_json(path: str | os.PathLike[str], what: str = "JSON file", *,
              error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """The parsed JSON document of ``path``: regular file, size cap, UTF-8, nesting depth, then ``json.loads``
    (its error as one line with the line and column). NaN and Infinity literals are refused."""
    source = str(path)
    text = read_text(path, what, error=error, max_bytes=max_bytes)
    depth = json_depth(text)
    if depth > max_depth:
        raise error(_too_deep(source, depth, max_depth, what))

    def constant(name: str) -> Any:
        raise error(f"{source}: {name} is not a JSON number; expected finite numbers in a {what}")

    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                    f"expected a {what}") from None
    except RecursionError:
        raise error(_too_deep(source, json_depth(text), max_depth, what)) from None


def _depth(value: Any) -> int:
    """Nesting depth of parsed lists and dicts, iteratively (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def load_toml(path: str | os.PathLike[str], what: str = "TOML file", *,
              error: type[Exception] = UserFileError, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The parsed TOML document of ``path``: regular file, size cap, UTF-8, the parser's error as one line,
    and the nesting depth (tomllib recurses, so a deep document is caught as RecursionError too)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    source = str(path)
    text = read_text(path, what, error=error, max_bytes=max_bytes)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{source}: not valid TOML ({exc}); expected a {what}") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply for the TOML parser, over the limit of {max_depth}; "
                    f"expected a flatter {what}") from None
    depth = _depth(data)
    if depth > max_depth:
        raise error(_too_deep(source, depth, max_depth, what))
    return data


# ---- values read from a user's file or command line ------------------------------------------------------
INT64_MAX = 2**63 - 1


def check_number(value: Any, where: str, *, error: type[Exception] = UserFileError, integer: bool = False,
                 ge: float | None = None, gt: float | None = None, le: float | None = None) -> Any:
    """``value`` if it is a finite number (an integer when ``integer``; booleans and strings refused) within
    the bounds, else ``error("<where> = <value> is invalid: expected ...")``: ``where`` names the file and
    the key (``"my.toml: gpu.hbm_gb"``). Integers beyond int64 and floats beyond float64 are refused with
    that range, so no value overflows later. The one check of a number a user gave."""
    lo = f" > {gt:g}" if gt is not None else f" ≥ {ge:g}" if ge is not None else ""
    hi = f" and ≤ {le:g}" if le is not None else ""
    want = f"{'an integer' if integer else 'a finite number'}{lo}{hi}"
    shown = f"an integer of {len(str(abs(value)))} digits" if isinstance(value, int) and abs(value) > 10**30 \
        else repr(value)

    def bad(extra: str = "") -> Exception:
        return error(f"{where} = {shown} is invalid: expected {want}{extra}")

    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise bad()
    if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise bad(f" (outside the int64 range ±{INT64_MAX:,})")
    if isinstance(value, float) and not math.isfinite(value):
        raise bad()
    if (gt is not None and not value > gt) or (ge is not None and not value >= ge) or \
            (le is not None and not value <= le):
        raise bad()
    return value
