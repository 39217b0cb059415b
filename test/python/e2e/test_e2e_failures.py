"""How a program fails: the error kind, where (index, op, id), message and traceback.

A syntax or top-level error in a module is ``parse``; an exception escaping a run is
``runtime`` with the message ``"<Type>: <message>"``; an AssertionError is ``correctness``;
a value that cannot be returned is ``serialization``. Returns made before the failure stay
in the result (unless the returned bytes themselves cannot be kept: then none does); later
instructions do not run; the client raises the matching class.
"""

from __future__ import annotations

import pytest
from kcoral import (
    CorrectnessFailed,
    ParseFailed,
    Program,
    ProgramFailed,
    RuntimeFailed,
    SerializationFailed,
)

ERROR_FIELDS = {"kind", "message", "instruction_index", "instruction_op", "instruction_id",
                "traceback"}

FUNCTIONS = r'''
import sys

class CustomError(Exception):
    pass

def ok():
    print("ok ran")
    return "first"

def value_error():
    print("before the failure")
    raise ValueError("bad value 42")

def bare():
    raise KeyError

def custom():
    raise CustomError("custom text")

def check():
    assert 1 + 1 == 3, "arithmetic is broken"

def exits():
    sys.exit(3)

def nan():
    return float("nan")

def later():
    print("LATER RAN")
    open("later-ran", "w").close()
    return "later"
'''


def failing_program(failing: str, *, module_source: str = FUNCTIONS) -> Program:
    """ok() returned as 'first'; then ``failing`` as run 'bad' returned as 'bad'; then later()."""
    program = Program()
    module = program.upload(id="m", kind="module", source=module_source)
    ok = program.run(id="ok", fn=program.get_function(id="ok_fn", module=module, name="ok"))
    program.return_(key="first", value=ok)
    bad = program.run(id="bad", fn=program.get_function(id="bad_fn", module=module, name=failing))
    program.return_(key="bad", value=bad)
    later = program.run(id="later", fn=program.get_function(id="later_fn", module=module,
                                                            name="later"))
    program.return_(key="later", value=later)
    return program


def check_failure(result, kind: str, index: int, op: str, instruction_id: str | None):
    assert result.status == "FAILED"
    assert set(result.error) == ERROR_FIELDS
    assert result.error["kind"] == kind, result.error
    assert result.error["instruction_index"] == index
    assert result.error["instruction_op"] == op
    assert result.error["instruction_id"] == instruction_id
    assert "LATER RAN" not in result.stdout
    assert "later" not in result.results


@pytest.mark.parametrize(
    ("failing", "message"),
    [
        ("value_error", "ValueError: bad value 42"),
        ("bare", "KeyError"),
        ("exits", "SystemExit: 3"),
    ],
)
def test_runtime_failure(server, failing, message):
    result = server.execute(failing_program(failing))
    check_failure(result, "runtime", 5, "run", "bad")
    assert result.error["message"] == message
    assert "Traceback" in result.error["traceback"]
    assert f"in {failing}" in result.error["traceback"]
    assert result.results == {"first": "first"}
    assert "ok ran" in result.stdout
    with pytest.raises(RuntimeFailed) as raised:
        result.raise_for_error()
    assert raised.value.instruction_id == "bad" and raised.value.result is result


def test_runtime_failure_of_a_custom_exception_names_its_type(server):
    result = server.execute(failing_program("custom"))
    check_failure(result, "runtime", 5, "run", "bad")
    assert result.error["message"].endswith("CustomError: custom text")


def test_assertion_is_correctness(server):
    result = server.execute(failing_program("check"))
    check_failure(result, "correctness", 5, "run", "bad")
    assert result.error["message"] == "AssertionError: arithmetic is broken"
    assert "assert 1 + 1 == 3" in result.error["traceback"]
    assert result.results == {"first": "first"}
    with pytest.raises(CorrectnessFailed):
        result.raise_for_error()


def test_unreturnable_value_is_serialization(server):
    result = server.execute(failing_program("nan"))
    check_failure(result, "serialization", 6, "return", None)
    assert "non-finite" in result.error["message"]
    assert result.results == {"first": "first"}
    with pytest.raises(SerializationFailed):
        result.raise_for_error()


LOST_PARTS = r'''
import resource

def ok():
    return "first"

def no_room_for_its_bytes():
    value = [b"q" * 1000] * 10
    # No address space left to map the memory file its returned bytes are kept in.
    size = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size << 9, size << 9))
    return value

def later():
    return "later"
'''


def test_returned_bytes_that_cannot_be_kept_fail_the_program_and_no_value_returns(server):
    """The worker cannot map the memory file of a program's returned bytes (the program
    left itself no address space): FAILED, serialization, and none of the values, which
    would name the lost parts (they used to, and the front took that for a broken
    protocol: 500, engine). The next program is served."""
    result = server.execute(failing_program("no_room_for_its_bytes", module_source=LOST_PARTS))
    check_failure(result, "serialization", 9, "return", None)  # the last: the parts are kept at the end
    assert "cannot be kept" in result.error["message"] and "no value is returned" in result.error["message"]
    assert result.results == {}
    with pytest.raises(SerializationFailed):
        result.raise_for_error()
    assert server.execute(failing_program("ok", module_source=LOST_PARTS)).raise_for_error()["bad"] == "first"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def broken(:\n    pass\n", "SyntaxError"),
        ("import sys\nraise RuntimeError('at import time')\n", "RuntimeError: at import time"),
        ("import module_that_does_not_exist_kcoral\n", "ModuleNotFoundError"),
        ("x = 1 / 0\n", "ZeroDivisionError: division by zero"),
    ],
    ids=["syntax", "raise", "import", "zero-division"],
)
def test_module_errors_are_parse(server, source, message):
    program = Program()
    program.upload(id="first", kind="bytes", value=b"ok")
    module = program.upload(id="mod", kind="module", source=source)
    program.get_function(id="fn", module=module, name="anything")
    result = server.execute(program)
    check_failure(result, "parse", 1, "upload", "mod")
    assert result.error["message"].startswith(message)
    with pytest.raises(ParseFailed):
        result.raise_for_error()


def test_syntax_error_traceback_points_at_the_line(server):
    program = Program()
    program.upload(id="mod", kind="module", source="x = 1\ny = (\n")
    result = server.execute(program)
    assert result.error["kind"] == "parse"
    assert "line 2" in result.error["message"] or "line 2" in result.error["traceback"]


def test_missing_function_name_is_parse(server):
    program = Program()
    module = program.upload(id="mod", kind="module", source="def present():\n    pass\n")
    program.get_function(id="fn", module=module, name="absent")
    result = server.execute(program)
    check_failure(result, "parse", 1, "get_function", "fn")
    assert "absent" in result.error["message"]


def test_calling_a_non_callable_is_runtime(server):
    program = Program()
    data = program.upload(id="data", kind="bytes", value=b"not callable")
    program.run(id="call", fn=data)
    result = server.execute(program)
    check_failure(result, "runtime", 1, "run", "call")
    assert "not callable" in result.error["message"]


def test_wrong_argument_count_is_runtime(server):
    program = Program()
    module = program.upload(id="mod", kind="module", source="def one(x):\n    return x\n")
    program.run(id="call", fn=program.get_function(id="fn", module=module, name="one"),
                args=[1, 2])
    result = server.execute(program)
    check_failure(result, "runtime", 2, "run", "call")
    assert result.error["message"].startswith("TypeError:")


def test_failure_keeps_output_up_to_it(server):
    result = server.execute(failing_program("value_error"))
    assert result.stdout == "ok ran\nbefore the failure\n"


def test_program_failed_is_data_not_an_exception(server):
    result = server.execute(failing_program("value_error"))
    assert not result.completed
    with pytest.raises(ProgramFailed) as raised:
        result.raise_for_error()
    assert str(raised.value) == "runtime at instruction 5 (run 'bad'): ValueError: bad value 42"
    assert raised.value.traceback == result.error["traceback"]
