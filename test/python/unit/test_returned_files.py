"""ReturnedFile and ReturnedFolder: contents, and how they save to disk."""

import os
import stat

import pytest

from kcoral import ReturnedFile, ReturnedFolder


def listing(root):
    found = []
    for directory, dirs, files in os.walk(root):
        relative = os.path.relpath(directory, root)
        found += [os.path.normpath(os.path.join(relative, name)) + "/" for name in dirs]
        found += [os.path.normpath(os.path.join(relative, name)) for name in files]
    return sorted(found)


def test_returned_file_basics():
    file = ReturnedFile(b"data")
    assert file.read_bytes() == b"data"
    assert file == ReturnedFile(b"data") and file != ReturnedFile(b"other")
    assert "4 bytes" in repr(file)
    with pytest.raises(TypeError):
        ReturnedFile("text")  # type: ignore[arg-type]


def test_file_save_creates_a_private_file(tmp_path):
    destination = tmp_path / "report.txt"
    assert ReturnedFile(b"data").save(destination) == destination
    assert destination.read_bytes() == b"data"
    assert stat.S_IMODE(destination.stat().st_mode) == 0o600
    assert listing(tmp_path) == ["report.txt"]  # no staging file left behind


def test_file_save_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    ReturnedFile(b"x").save("sub/x.bin")
    assert (tmp_path / "sub" / "x.bin").read_bytes() == b"x"


def test_file_save_refuses_existing_unless_overwrite(tmp_path):
    destination = tmp_path / "out"
    destination.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        ReturnedFile(b"new").save(destination)
    assert destination.read_bytes() == b"old"
    ReturnedFile(b"new").save(destination, overwrite=True)
    assert destination.read_bytes() == b"new"
    assert listing(tmp_path) == ["out"]


def test_file_save_never_follows_links(tmp_path):
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(FileExistsError):
        ReturnedFile(b"x").save(tmp_path / "link")
    with pytest.raises(ValueError, match="regular file"):
        ReturnedFile(b"x").save(tmp_path / "link", overwrite=True)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        ReturnedFile(b"x").save(tmp_path / "dangling")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "real").mkdir()
    (tmp_path / "dirlink").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        ReturnedFile(b"x").save(tmp_path / "dirlink" / "file")
    assert target.read_bytes() == b"keep" and listing(tmp_path / "real") == []


def test_file_save_needs_an_existing_parent_and_a_name(tmp_path):
    with pytest.raises(FileNotFoundError):
        ReturnedFile(b"x").save(tmp_path / "missing" / "file")
    with pytest.raises(ValueError):
        ReturnedFile(b"x").save(tmp_path / "..")
    (tmp_path / "dir").mkdir()
    with pytest.raises(ValueError):
        ReturnedFile(b"x").save(tmp_path / "dir", overwrite=True)


def sample_folder():
    return ReturnedFolder(
        {".hidden": ReturnedFile(b"h"), "a/b/c.txt": ReturnedFile(b"c"), "z": ReturnedFile(b"")},
        ("a", "a/b", "empty"),
    )


def test_folder_accessors():
    folder = sample_folder()
    assert list(folder.files) == [".hidden", "a/b/c.txt", "z"]
    assert folder.directories == ("a", "a/b", "empty")
    with pytest.raises(TypeError):
        folder.files["new"] = ReturnedFile(b"")  # type: ignore[index]
    assert folder == sample_folder()


@pytest.mark.parametrize(
    ("files", "directories", "error"),
    [
        ({"a/x": ReturnedFile(b"")}, (), ValueError),
        ({"b": ReturnedFile(b""), "a": ReturnedFile(b"")}, (), ValueError),
        ({"x": ReturnedFile(b"")}, ("x",), ValueError),
        ({"../x": ReturnedFile(b"")}, (), ValueError),
        ({"x": b"raw"}, (), TypeError),
    ],
)
def test_folder_manifest_is_checked(files, directories, error):
    with pytest.raises(error):
        ReturnedFolder(files, directories)


def test_folder_save_recreates_the_tree(tmp_path):
    destination = tmp_path / "out"
    assert sample_folder().save(destination) == destination
    assert listing(destination) == [".hidden", "a/", "a/b/", "a/b/c.txt", "empty/", "z"]
    assert (destination / "a" / "b" / "c.txt").read_bytes() == b"c"
    assert stat.S_IMODE(destination.stat().st_mode) == 0o700
    assert stat.S_IMODE((destination / "z").stat().st_mode) == 0o600


def test_folder_save_refuses_an_existing_destination(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        sample_folder().save(tmp_path / "out")
    (tmp_path / "link").symlink_to(tmp_path / "out")
    with pytest.raises(FileExistsError):
        sample_folder().save(tmp_path / "link")
    assert listing(tmp_path / "out") == []


def test_folder_save_removes_partial_output_on_failure(tmp_path, monkeypatch):
    written = []

    def failing_read(self):
        if written:
            raise OSError("disk full")
        written.append(self)
        return b"first"

    monkeypatch.setattr(ReturnedFile, "read_bytes", failing_read)
    with pytest.raises(OSError, match="disk full"):
        sample_folder().save(tmp_path / "out")
    assert listing(tmp_path) == []


def test_empty_folder_saves_as_an_empty_directory(tmp_path):
    ReturnedFolder({}).save(tmp_path / "empty")
    assert listing(tmp_path) == ["empty/"]
