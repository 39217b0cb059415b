"""The public surface of the kcoral package, and what importing it costs."""

import os
import pathlib
import subprocess
import sys

import kcoral

EXPECTED_EXPORTS = [
    "Client",
    "CompileFailed",
    "CorrectnessFailed",
    "DeadlineExceeded",
    "EngineError",
    "EngineFailed",
    "ExecutionTimeout",
    "GpuAccessViolation",
    "KCoralError",
    "ParseFailed",
    "Program",
    "ProgramFailed",
    "ProgramResult",
    "ProtocolError",
    "Register",
    "RemoteFunction",
    "RequestRejected",
    "RequestTooLarge",
    "ResponseTooLarge",
    "ReturnedFile",
    "ReturnedFolder",
    "RuntimeFailed",
    "SerializationFailed",
    "ServerBusy",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "run_local",
]


def test_exports_are_pinned():
    assert sorted(kcoral.__all__) == EXPECTED_EXPORTS
    for name in kcoral.__all__:
        assert getattr(kcoral, name) is not None


def test_version_is_a_string():
    assert isinstance(kcoral.__version__, str) and kcoral.__version__


def in_a_fresh_interpreter(code: str) -> str:
    """What `code` prints, run by a new interpreter importing this kcoral."""
    package_root = str(pathlib.Path(kcoral.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": package_root}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_package_is_typed():
    assert (pathlib.Path(kcoral.__file__).parent / "py.typed").is_file()


def test_import_and_building_load_no_torch_builtins_or_native_module():
    code = (
        "import sys, numpy, kcoral\n"
        "kcoral.Program().upload(kind='tensor', value=numpy.zeros(2, numpy.float32))\n"
        "heavy = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')\n"
        "         or m in ('kcoral.builtins', 'kcoral._native')]\n"
        "print(heavy)\n"
    )
    assert in_a_fresh_interpreter(code).strip() == "[]"


def test_the_server_side_loads_none_of_the_client():
    # A server's workers import kcoral.builtins; each module their parent holds makes every
    # fresh worker dearer to fork, to start and to tear down. The client's names still come
    # on first use, by attribute or by from-import.
    code = (
        "import sys, kcoral, kcoral.builtins\n"
        "late = ('numpy', 'threading', 'dataclasses', 'httpx', 'ssl', 'importlib.metadata',\n"
        "        'kcoral._client', 'kcoral._program', 'kcoral._result', 'kcoral._errors')\n"
        "print([m for m in late if m in sys.modules])\n"
        "from kcoral import Program, KCoralError\n"
        "assert kcoral.Client.__module__ == 'kcoral._client'\n"
        "assert Program.__module__ == 'kcoral._program' and issubclass(KCoralError, Exception)\n"
        "assert kcoral.__version__ and 'Client' in dir(kcoral)\n"
        "print('httpx' in sys.modules)\n"
    )
    assert in_a_fresh_interpreter(code).split() == ["[]", "True"]


def test_an_unknown_attribute_is_an_attribute_error():
    try:
        kcoral.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("kcoral.NoSuchThing resolved")
