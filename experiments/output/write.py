"""The one way a command writes a file: every output checked before any work, written atomically, all or none.

A command names its outputs (option → path) and its inputs (the files it reads) in :class:`Outputs`, which
checks every output up front and refuses, as one :class:`~experiments.errors.OutputError` line naming the
option and the path:

- a path that is an existing directory, or whose parent directory is missing or not a directory;
- a parent directory the command cannot create a file in (read-only, no permission, a read-only mount);
- a path that is one of the command's inputs (``--plan-out`` onto the trace, ``calibrate P -o P``) or another
  output of the same command (``--plan-out X --chrome-trace X``), compared by the resolved file (a symbolic
  or hard link to the same file counts);
- an image output whose extension matplotlib cannot write (:data:`IMAGE_SUFFIXES`).

Each output is then written to a temporary file in its own directory (created by the check, so a directory
that refuses files fails before anything is computed); :meth:`Outputs.commit` flushes every temporary file
to disk (``fsync``) and only then moves them all into place (``os.replace``). A failure on the way (a full
disk, ``ENOSPC``; an exception of the command) removes the temporary files and leaves every earlier output
as it was: there is never a half-written file nor a half-written set.

JSON goes through :func:`dumps_json`: ``allow_nan=False`` and a non-finite number is refused naming its field
(``results[0].mfu = nan``), so no ``--json`` document or Chrome trace holds ``NaN`` or ``Infinity`` (which are
not JSON: RFC 8259 §6).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from dcpsim.experiments.errors import OutputError

# The image formats matplotlib's Agg canvas writes without optional packages
# (matplotlib.backend_bases.FigureCanvasBase.get_supported_filetypes(), matplotlib 3.x).
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".eps", ".ps")

PathLike = str | os.PathLike[str]


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """The resolved path and, for an existing file, its (device, inode): two names of one file compare equal."""
    try:
        st = os.stat(path)
        return os.path.realpath(path), (st.st_dev, st.st_ino)
    except OSError:
        return os.path.realpath(path), None


def _same(a: tuple[str, tuple[int, int] | None], b: tuple[str, tuple[int, int] | None]) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _strerror(e: OSError) -> str:
    return e.strerror or str(e)


class Outputs:
    """The outputs of one command: checked when made, written through :meth:`path` / :meth:`write_text`,
    moved into place together by :meth:`commit` (or by leaving the ``with`` block without an exception)."""

    def __init__(self, outputs: Mapping[str, PathLike | None], inputs: Mapping[str, PathLike | None] | None = None,
                 images: Iterable[str] = ()) -> None:
        self._final: dict[str, Path] = {}
        self._tmp: dict[str, Path] = {}
        images = set(images)
        seen: list[tuple[str, tuple[str, tuple[int, int] | None]]] = []
        given_inputs = [(name, _identity(Path(p))) for name, p in (inputs or {}).items() if p]
        try:
            for option, raw in outputs.items():
                if raw is None or raw == "":
                    continue
                path = Path(raw)
                self._check(option, path, option in images)
                ident = _identity(path)
                for name, other in given_inputs:
                    if _same(ident, other):
                        raise OutputError(f"{option} {path}: that is the command's input ({name}); refusing to "
                                          "overwrite it: give another file name")
                for other_option, other in seen:
                    if _same(ident, other):
                        raise OutputError(f"{option} {path}: the same file as {other_option}; give each output "
                                          "its own file name")
                seen.append((option, ident))
                self._final[option] = path
                self._tmp[option] = self._create_tmp(option, path)
        except BaseException:
            self.discard()
            raise

    @staticmethod
    def _check(option: str, path: Path, image: bool) -> None:
        if path.is_dir():
            raise OutputError(f"{option} {path}: is a directory; give a file name")
        if path.exists() and not path.is_file():
            raise OutputError(f"{option} {path}: exists and is not a regular file")
        parent = path.parent
        if not parent.exists():
            raise OutputError(f"{option} {path}: directory {parent} does not exist")
        if not parent.is_dir():
            raise OutputError(f"{option} {path}: {parent} is not a directory")
        if image and path.suffix.lower() not in IMAGE_SUFFIXES:
            shown = repr(path.suffix) if path.suffix else "none"
            raise OutputError(f"{option} {path}: unknown image extension {shown}; valid: "
                              f"{', '.join(IMAGE_SUFFIXES)}")

    @staticmethod
    def _create_tmp(option: str, path: Path) -> Path:
        # the output's own suffix last: writers that pick the format by suffix (savefig, to_parquet) still do
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.close(fd)
        except OSError as e:
            raise OutputError(f"{option} {path}: cannot create a file in {path.parent}: {_strerror(e)}") from None
        return tmp

    def __contains__(self, option: str) -> bool:
        return option in self._final

    def final(self, option: str) -> Path:
        """Where ``option``'s output lands once committed."""
        return self._final[option]

    def path(self, option: str) -> Path:
        """The temporary file to write ``option``'s output to (any writer: ``to_csv``, ``savefig``, …)."""
        return self._tmp[option]

    @contextmanager
    def writing(self, option: str) -> Iterator[Path]:
        """The temporary file of ``option`` for a writer of its own (``to_csv``, ``savefig``); its OSError (a
        full disk) becomes one line naming the output."""
        try:
            yield self._tmp[option]
        except OSError as e:
            raise OutputError(f"cannot write {self._final[option]} ({option}): {_strerror(e)}") from None

    def write_bytes(self, option: str, data: bytes) -> None:
        tmp = self._tmp[option]
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as e:
            raise OutputError(f"cannot write {self._final[option]} ({option}): {_strerror(e)}") from None

    def write_text(self, option: str, text: str) -> None:
        self.write_bytes(option, text.encode("utf-8"))

    def commit(self) -> list[Path]:
        """Flush every temporary file to disk, then move them all into place; on a failure nothing moves."""
        for option, tmp in self._tmp.items():
            try:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                self.discard()
                raise OutputError(f"cannot write {self._final[option]} ({option}): {_strerror(e)}") from None
        for option, tmp in self._tmp.items():
            os.replace(tmp, self._final[option])
        self._tmp.clear()
        return list(self._final.values())

    def discard(self) -> None:
        """Remove the temporary files (the earlier outputs stay as they were)."""
        for tmp in self._tmp.values():
            try:
                tmp.unlink()
            except OSError:
                pass
        self._tmp.clear()

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def output_directory(path: PathLike, option: str) -> Path:
    """Make ``path`` a directory the command can write its files in, before any work, or refuse in one
    :class:`OutputError` line: a path that exists and is not a directory, a directory that cannot be created
    (a missing or read-only parent, an unwritable working directory) or that refuses a new file."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option} {out}: exists and is not a directory; give a directory name")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{option} {out}: cannot create the directory: {_strerror(e)}") from None
    probe = out / f".dcpsim-probe.{os.getpid()}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        probe.unlink()
    except OSError as e:
        raise OutputError(f"{option} {out}: cannot create a file there: {_strerror(e)}") from None
    return out


@contextmanager
def atomic_path(path: PathLike, option: str = "output", image: bool = False) -> Iterator[Path]:
    """One output: yields the temporary file to write, moved onto ``path`` when the block ends without error."""
    with Outputs({option: path}, images=(option,) if image else ()) as out, out.writing(option) as tmp:
        yield tmp


def write_text(path: PathLike, text: str, option: str = "output",
               inputs: Mapping[str, PathLike | None] | None = None) -> Path:
    """Write one text file atomically (checked as :class:`Outputs` checks)."""
    with Outputs({option: path}, inputs) as out:
        out.write_text(option, text)
    return Path(path)


def nonfinite_field(obj: Any, where: str = "") -> str | None:
    """The first field of a JSON-like document holding NaN or ±Infinity (``results[0].mfu = nan``), or None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else f"{where or 'the value'} = {obj}"
    if hasattr(obj, "tolist") and not isinstance(obj, str | bytes):  # a numpy scalar or array
        return nonfinite_field(obj.tolist(), where)
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            found = nonfinite_field(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            found = nonfinite_field(v, f"{where}[{i}]")
            if found:
                return found
    return None


def nulls_for_nonfinite(obj: Any) -> Any:
    """A copy of a JSON-like document with every NaN or ±Infinity as None (JSON ``null``): for the documents
    whose non-finite numbers mean "no value" (no noise estimate from one round, no error of an unfitted term)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: nulls_for_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [nulls_for_nonfinite(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str | bytes):
        return nulls_for_nonfinite(obj.tolist())
    return obj


def _default(o: Any) -> Any:
    if hasattr(o, "tolist"):  # a numpy scalar or array (numpy is not imported here: 'dcpsim --help' stays fast)
        return o.tolist()
    if isinstance(o, set):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def dumps_json(obj: Any, what: str, **kw: Any) -> str:
    """``json.dumps`` with ``allow_nan=False``; a non-finite number is one :class:`OutputError` line naming
    ``what`` (the option or output) and the field."""
    kw.setdefault("default", _default)
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        field = nonfinite_field(obj) or "a number"
        raise OutputError(f"{what}: refusing to write a non-finite number, which JSON cannot hold: {field}") \
            from None
