"""Workspace path normalization and the file-upload conflict rule."""

import pytest

from kcoral._paths import check_no_conflicts, normalize_path


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("a", "a"),
        ("a/b.txt", "a/b.txt"),
        ("./a//b/./c", "a/b/c"),
        ("a/", "a"),
        (".hidden/x", ".hidden/x"),
        ("..a/b..", "..a/b.."),
        ("\u00e9/x", "\u00e9/x"),
    ],
)
def test_normalize(raw, normalized):
    assert normalize_path(raw) == normalized


@pytest.mark.parametrize(
    "raw",
    ["", "/abs", "a/../b", "..", "a\\b", "a\x00b", ".", "./", "//", "a/" + "x" * 256, "a/" * 2049],
)
def test_normalize_rejects(raw):
    with pytest.raises(ValueError):
        normalize_path(raw)


def test_normalize_limits_count_utf8_bytes():
    assert normalize_path("\u00e9" * 127)  # 254 bytes
    with pytest.raises(ValueError):
        normalize_path("\u00e9" * 128)  # 256 bytes
    assert normalize_path("/".join(["x" * 255] * 16))  # 4095 bytes
    with pytest.raises(ValueError):
        normalize_path("/".join(["x" * 255] * 16) + "/y")


def test_normalize_rejects_non_strings():
    with pytest.raises(TypeError):
        normalize_path(b"a")


def test_conflicts():
    check_no_conflicts(["a", "a-b/c"], ["b", "a.txt", "ab/c"])
    with pytest.raises(ValueError, match="share"):
        check_no_conflicts(["a/b"], ["a/b"])
    with pytest.raises(ValueError, match="inside"):
        check_no_conflicts(["a"], ["a/b"])
    with pytest.raises(ValueError, match="inside"):
        check_no_conflicts(["a/b/c"], ["a/b"])
    with pytest.raises(ValueError, match="inside"):
        check_no_conflicts([], ["a", "a-b", "a/b"])
    with pytest.raises(ValueError, match="share"):
        check_no_conflicts([], ["x", "x"])
