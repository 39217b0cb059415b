"""One source for the wire's tables and rules: the Python client agrees with libkcoral.

The tensor dtypes (and their item sizes) and the workspace path rules live in libkcoral;
the client keeps its own copies so that it needs no native code to build a request. These
tests hold the copies to the source, through the native module: the dtype table entry for
entry, and the path rules over a corpus of paths (canonical form or refusal, and the
collision rule), so a change on either side that the other lacks fails here.
"""

from __future__ import annotations

import pytest

from kcoral._paths import check_no_conflicts, normalize_path
from kcoral._program import DTYPE_ITEM_SIZES

native = pytest.importorskip("kcoral._native")

PATHS = [
    "a", "a/b", "./a", "a/./b", "a//b", "a/", "a/b/", ".", "./", "", "/", "/a", "..", "a/..",
    "../a", "a/../b", "a/..b", "..a", "...", "a\\b", "a\x00b", "é/ü", "x" * 255, "x" * 256,
    "/".join(["d"] * 2000), "/".join(["d" * 200] * 20), "/".join(["d" * 200] * 21), " ", "a /b",
    "./" * 2048 + "a", "./" * 2047 + "ab",  # padding counts: 4097 and 4096 bytes as written
]

COLLISIONS = [
    [], ["a"], ["a", "b"], ["a", "a"], ["a", "a/b"], ["a/b", "a"], ["a-b", "a", "a/b"], ["a", "ab"],
    ["a/b", "a/c"], ["a/b/c", "a/b"], ["x/y", "x/y"], ["a.b", "a/b"],
]


def verdict(function, *args):
    try:
        return ("ok", function(*args))
    except ValueError:
        return ("refused", None)


def test_the_dtype_table_is_libkcorals():
    assert DTYPE_ITEM_SIZES == native.dtypes()


@pytest.mark.parametrize("path", PATHS, ids=range(len(PATHS)))
def test_a_path_is_judged_and_normalized_as_libkcoral_does(path):
    assert verdict(normalize_path, path) == verdict(native.normalize_path, path)


@pytest.mark.parametrize("paths", COLLISIONS, ids=range(len(COLLISIONS)))
def test_upload_paths_collide_as_libkcoral_says(paths):
    assert verdict(check_no_conflicts, [], paths)[0] == verdict(native.check_paths, paths)[0]
