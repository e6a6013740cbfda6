"""dcpsim.userfile: a user's file is read only if it is a regular file within the size cap, decoded as UTF-8,
and nested no deeper than the limit; every refusal is one line in the caller's error class."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dcpsim import userfile
from dcpsim.userfile import UserFileError


class MyError(ValueError):
    pass


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_text('\ufeff{"x": [1, 2, {"y": "[[[["}]}', encoding="utf-8")  # a BOM and brackets in a string
    assert userfile.load_json(p) == {"x": [1, 2, {"y": "[[[["}]}
    assert userfile.json_depth(p.read_text(encoding="utf-8")) == 3
    t = tmp_path / "a.toml"
    t.write_text("[a]\nb = [[1], [2]]\n", encoding="utf-8")
    assert userfile.load_toml(t) == {"a": {"b": [[1], [2]]}}


@pytest.mark.parametrize("kind,words", [("fifo", "is a FIFO (named pipe), not a regular file"),
                                        ("dir", "is a directory, not a regular file"),
                                        ("missing", "file not found")])
def test_not_a_regular_file_is_refused_without_opening(tmp_path: Path, kind: str, words: str) -> None:
    p = tmp_path / "x.json"
    if kind == "fifo":
        os.mkfifo(p)  # opening it for reading would block forever: the check must come first
    elif kind == "dir":
        p.mkdir()
    for read in (userfile.read_bytes, userfile.read_text, userfile.load_json, userfile.load_toml):
        with pytest.raises(MyError, match=re.escape(words)) as info:
            read(p, error=MyError)
        assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_size_cap(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_text("[" + "1," * 100 + "1]", encoding="utf-8")
    with pytest.raises(UserFileError, match="203 bytes, over the limit of 100 bytes"):
        userfile.read_text(p, max_bytes=100)
    assert userfile.load_json(p, max_bytes=203) == [1] * 101


def test_non_utf8_names_line_column_and_byte(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_bytes(b'a = 1\nb = "\xe9t\xe9"\n')
    with pytest.raises(UserFileError, match=r"line 2, column 6: byte b'\\xe9' is not UTF-8"):
        userfile.load_toml(p, "GPU file")


def test_nesting_depth(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")  # json.loads would raise RecursionError
    with pytest.raises(UserFileError, match="nested 100000 levels deep, over the limit of 64"):
        userfile.load_json(deep)
    ok = tmp_path / "ok.json"
    ok.write_text("[" * 5 + "]" * 5, encoding="utf-8")
    with pytest.raises(UserFileError, match="nested 5 levels deep, over the limit of 4"):
        userfile.load_json(ok, max_depth=4)
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(UserFileError, match="nested too deeply"):
        userfile.load_toml(toml)
    shallow = tmp_path / "s.toml"
    shallow.write_text("a = [[[[1]]]]\n", encoding="utf-8")
    with pytest.raises(UserFileError, match="nested 5 levels deep, over the limit of 3"):
        userfile.load_toml(shallow, max_depth=3)


@pytest.mark.parametrize("text,words", [("[1, NaN]", "NaN is not a JSON number"),
                                        ("[-Infinity]", "-Infinity is not a JSON number"),
                                        ("[1,", "not valid JSON")])
def test_json_errors_are_one_line(tmp_path: Path, text: str, words: str) -> None:
    p = tmp_path / "x.json"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(UserFileError, match=words) as info:
        userfile.load_json(p)
    assert "\n" not in str(info.value)


def test_bad_toml_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    p.write_text("a = [1,\n", encoding="utf-8")
    with pytest.raises(UserFileError, match="not valid TOML") as info:
        userfile.load_toml(p)
    assert "\n" not in str(info.value)


# ---- check_number: the one check of a user's number ------------------------------------------------------
def test_check_number_accepts_the_bounds_and_refuses_what_lies_outside():
    from dcpsim.userfile import INT64_MAX, UserFileError, check_number

    assert check_number(0, "f: k", ge=0) == 0 and check_number(1.5, "f: k", gt=1, le=1.5) == 1.5
    assert check_number(INT64_MAX, "f: k", integer=True) == INT64_MAX
    assert check_number(-INT64_MAX - 1, "f: k", integer=True) == -INT64_MAX - 1
    cases = [  # (value, options, the message's tail)
        (INT64_MAX + 1, {"integer": True}, "expected an integer (outside the int64 range ±9,223,372,036,854,775,807)"),
        (-INT64_MAX - 2, {}, "outside the int64 range"),
        (float("nan"), {}, "expected a finite number"),
        (float("-inf"), {"ge": 0}, "expected a finite number ≥ 0"),
        (True, {"integer": True}, "expected an integer"),
        ("3", {}, "expected a finite number"),
        (2.0, {"integer": True}, "expected an integer"),
        (0, {"gt": 0}, "expected a finite number > 0"),
        (-1e-9, {"ge": 0}, "≥ 0"),
        (11, {"ge": 1, "le": 10, "integer": True}, "expected an integer ≥ 1 and ≤ 10"),
        (None, {}, "expected a finite number"),
    ]
    for value, options, tail in cases:
        with pytest.raises(UserFileError) as e:
            check_number(value, "my.toml: gpu.hbm_gb", **options)
        message = str(e.value)
        assert message.startswith("my.toml: gpu.hbm_gb = ") and tail in message and "\n" not in message, message


def test_check_number_shortens_a_huge_integer_and_raises_the_callers_error():
    from dcpsim.userfile import check_number

    with pytest.raises(KeyError) as e:
        check_number(10**400, "f: n", integer=True, error=KeyError)
    assert "an integer of 401 digits" in str(e.value) and len(str(e.value)) < 200
