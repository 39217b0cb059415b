"""return_file and return_folder: snapshots of the program's working directory.

A folder comes back with every regular file (hidden ones too) and every directory (empty
ones and every ancestor, sorted); a path may be literal or taken from a value. Symbolic
links, special files and missing paths fail the return with ``serialization``.
"""

from __future__ import annotations

import hashlib

import pytest
from kcoral import Program, ReturnedFile, ReturnedFolder

from e2e.programs import response_document

MAKE_TREE = r'''
import os, pathlib

def make_tree():
    os.makedirs("out/a/b", exist_ok=True)
    os.makedirs("out/empty/deeper", exist_ok=True)
    open("out/a/b/c.txt", "w").write("c")
    open("out/.hidden", "w").write("hidden")
    open("out/a/.dot", "wb").write(b"\x00\x01")
    open("out/top.bin", "wb").write(bytes(range(256)))
    open("out/zero", "w").close()
    return "out"

def report():
    os.makedirs("reports", exist_ok=True)
    open("reports/r.txt", "w").write("report body")
    return pathlib.Path("reports/r.txt")

def link_inside():
    make_tree()
    os.symlink("top.bin", "out/link")

def link_to_file():
    open("real.txt", "w").write("x")
    os.symlink("real.txt", "link.txt")

def link_to_folder():
    make_tree()
    os.symlink("out", "alias")

def fifo():
    os.makedirs("pipes")
    os.mkfifo("pipes/fifo")

def not_a_path():
    return 42

def escaping():
    return "../outside.txt"
'''


def tree_program(setup: str, *returns: tuple[str, str, object]) -> Program:
    program = Program()
    module = program.upload(id="m", kind="module", source=MAKE_TREE)
    value = program.run(id="setup", fn=program.get_function(id="fn", module=module, name=setup))
    for key, kind, path in returns:
        path = value if path is None else path
        if kind == "file":
            program.return_file(key=key, path=path)
        else:
            program.return_folder(key=key, path=path)
    return program


def test_return_folder_lists_files_and_directories(server):
    result = server.execute(tree_program("make_tree", ("tree", "folder", "out"))).raise_for_error()
    folder = result["tree"]
    assert isinstance(folder, ReturnedFolder)
    assert {path: file.read_bytes() for path, file in folder.files.items()} == {
        ".hidden": b"hidden",
        "a/.dot": b"\x00\x01",
        "a/b/c.txt": b"c",
        "top.bin": bytes(range(256)),
        "zero": b"",
    }
    assert list(folder.directories) == ["a", "a/b", "empty", "empty/deeper"]


def test_return_folder_on_the_wire(server):
    program = tree_program("make_tree", ("tree", "folder", "out"))
    document, parts = response_document(server.post(*program.to_request()))
    node = document["results"]["tree"]
    assert node["type"] == "folder"
    assert list(node["files"]) == sorted(node["files"])
    assert node["directories"] == ["a", "a/b", "empty", "empty/deeper"]
    assert [file["part"] for file in node["files"].values()] == [f"return:{i}" for i in range(5)]
    for file in node["files"].values():
        data = parts[file["part"]]
        assert file["type"] == "file" and file["size"] == len(data)
        assert file["sha256"] == hashlib.sha256(data).hexdigest()


def test_return_file_literal_and_from_a_value(server, tmp_path):
    program = Program()
    module = program.upload(id="m", kind="module", source=MAKE_TREE)
    make_report = program.get_function(id="fn", module=module, name="report")
    report = program.run(id="report", fn=make_report)
    program.return_file(key="literal", path="./reports//r.txt")
    program.return_file(key="from_value", path=report)
    program.upload_file(id="uploaded", blob=b"up", path="in/u.txt")
    program.return_file(key="uploaded", path={"$ref": "uploaded"})
    result = server.execute(program).raise_for_error()
    assert result["literal"] == ReturnedFile(b"report body")
    assert result["from_value"].read_bytes() == b"report body"
    assert result["uploaded"].read_bytes() == b"up"
    saved = result["literal"].save(tmp_path / "r.txt")
    assert saved.read_bytes() == b"report body"


def test_return_folder_from_a_value(server):
    result = server.execute(tree_program("make_tree", ("tree", "folder", None))).raise_for_error()
    assert "a/b/c.txt" in result["tree"].files


@pytest.mark.parametrize(
    ("setup", "kind", "path", "fragment"),
    [
        ("link_inside", "folder", "out", "symbolic link"),
        ("link_to_file", "file", "link.txt", "symbolic link"),
        ("link_to_folder", "folder", "alias", "symbolic links are refused"),
        ("fifo", "folder", "pipes", "special file"),
        ("fifo", "file", "pipes/fifo", "not a regular file"),
        ("make_tree", "file", "missing.txt", "missing.txt"),
        ("make_tree", "folder", "missing", "missing"),
        ("make_tree", "file", "out", "out"),
        ("not_a_path", "file", None, "does not hold a path"),
        ("escaping", "file", None, ".."),
    ],
    ids=["symlink-in-folder", "symlink-file", "symlink-folder", "fifo-in-folder", "fifo-file",
         "missing-file", "missing-folder", "folder-as-file", "int-as-path", "escaping-path"],
)
def test_unreturnable_paths_fail_with_serialization(server, setup, kind, path, fragment):
    program = Program()
    module = program.upload(id="m", kind="module", source=MAKE_TREE)
    value = program.run(id="setup", fn=program.get_function(id="fn", module=module, name=setup))
    program.upload_file(blob=b"marker", path="marker.txt")
    program.return_file(key="kept", path="marker.txt")
    target = value if path is None else path
    if kind == "file":
        program.return_file(key="bad", path=target)
    else:
        program.return_folder(key="bad", path=target)
    result = server.execute(program)
    assert result.status == "FAILED"
    assert result.error["kind"] == "serialization", result.error
    assert fragment in result.error["message"]
    assert (result.error["instruction_index"], result.error["instruction_op"]) == (5, "return")
    assert result.results == {"kept": ReturnedFile(b"marker")}
