"""Remote functions without a server: source extraction, refusals, and the program a call makes.

What travels is the function's source, so these tests pin what that source is (dedented,
decorators dropped, string literals intact, line numbers kept), what is refused and with
which advice, and the shape of the program; ``run_local`` then runs that program in this
process through the native executor, which loads the module as a server would.
"""

from __future__ import annotations

import __future__
import functools
import inspect
import math
from pathlib import Path

import numpy as np
import pytest

from kcoral import Client, RuntimeFailed, run_local
from kcoral._remote import (
    LOADER_SOURCE,
    RemoteFunction,
    dedent_source,
    function_piece,
)

# Nothing listens here: decorating and building programs never connect.
client = Client("http://127.0.0.1:9")

SCALE = 3


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


def passthrough(*labels):
    def decorate(function):
        return function

    return decorate


@passthrough(
    "a decorator over several lines",
)
def decorated_here(x):  # decorated_here def
    return x


def helper(x):
    return x + 1


@functools.cache
def cached_helper(x):
    return x * 2


# -- source extraction -------------------------------------------------------------------------


def test_decorators_are_dropped_and_lines_kept():
    piece = function_piece(decorated_here, keep_decorators=False)
    assert piece.source == "def decorated_here(x):  # decorated_here def\n    return x\n"
    assert piece.filename == __file__
    assert piece.first_line == line_of("decorated_here def")
    assert piece.name == "decorated_here" and piece.free_variables == ()


def test_the_decorator_that_makes_the_remote_function_is_not_sent():
    @client.function(timeout_seconds=5)
    def add(a, b):
        return a + b

    assert add.source == "def add(a, b):\n    return a + b\n"
    assert "client.function" not in add.source


def test_nested_functions_are_dedented_with_their_strings_intact():
    def outer():
        def inner():  # inner def
            text = """
keeps its column
        and its indentation
        """
            return text

        return inner

    inner = outer()
    piece = function_piece(inner, keep_decorators=False)
    namespace: dict = {}
    exec(piece.source, namespace)
    assert namespace["inner"]() == inner()
    assert piece.source.startswith("def inner():  # inner def\n    text = ")
    assert piece.first_line == line_of("inner def")


def test_dedent_leaves_lines_inside_strings_alone():
    lines = ["    def f():\n", '        return """a\n', "    b\n", '  c"""\n']
    assert dedent_source(lines) == ["def f():\n", '    return """a\n', "    b\n", '  c"""\n']
    assert dedent_source(["def f():\n", "    pass\n"]) == ["def f():\n", "    pass\n"]


def test_prelude_helpers_keep_their_decorators():
    @client.function(prelude=["import functools", cached_helper])
    def twice(x):
        return cached_helper(x)

    assert twice.source == (
        "import functools\n"
        "@functools.cache\ndef cached_helper(x):\n    return x * 2\n"
        "def twice(x):\n    return cached_helper(x)\n"
    )


def test_source_is_prelude_then_function_and_names_are_kept():
    @client.function(prelude=["import math", helper])
    def root_plus_one(x: float) -> float:
        """Documented."""
        return helper(math.sqrt(x))

    assert root_plus_one.source.startswith("import math\ndef helper(x):\n")
    assert root_plus_one.source.endswith('"""Documented."""\n    return helper(math.sqrt(x))\n')
    assert root_plus_one.__name__ == "root_plus_one"
    assert root_plus_one.__doc__ == "Documented."
    assert str(inspect.signature(root_plus_one)) == "(x: 'float') -> 'float'"
    assert isinstance(root_plus_one, RemoteFunction)


def test_bare_decorator_and_rewrapping_keep_the_prelude():
    @client.function
    def bare(x):
        return x

    assert isinstance(bare, RemoteFunction) and bare.source == "def bare(x):\n    return x\n"

    @client.function(prelude="import math")
    def floor(x):
        return math.floor(x)

    again = client.function(cpu_only=True)(floor)
    assert again.source == floor.source == "import math\ndef floor(x):\n    return math.floor(x)\n"


# -- refusals --------------------------------------------------------------------------------------


def test_lambda_is_refused():
    with pytest.raises(TypeError, match="a lambda cannot run remotely.*define it with def"):
        client.function(lambda x: x)


def test_closure_is_refused_unless_the_prelude_defines_the_names():
    limit = 3

    def clamp(x):
        return min(x, limit)

    with pytest.raises(ValueError, match="clamp uses limit from the function enclosing it"):
        client.function(clamp)

    def uses_helper(x):
        return clamp(x)

    with pytest.raises(ValueError, match="uses_helper uses clamp"):
        client.function(uses_helper)
    assert client.function(prelude=["limit = 3", clamp])(uses_helper)


def test_function_without_source_is_refused():
    namespace: dict = {}
    exec("def made(x):\n    return x\n", namespace)
    with pytest.raises(ValueError, match="source of made is not available.*define it in a file"):
        client.function(namespace["made"])


@pytest.mark.parametrize("make, message", [
    (lambda: len, "is not a function defined with def"),
    (lambda: functools.partial(helper, 1), "is not a function defined with def"),
    (lambda: cached_helper, "wrapped by another decorator.*innermost"),
    (lambda: Holder.method, "defined in class Holder; a method cannot run remotely"),
    (lambda: coroutine, "is async"),
    (lambda: generator, "generator function"),
])
def test_what_is_not_a_plain_function_is_refused(make, message):
    with pytest.raises(TypeError, match=message):
        client.function(make())


class Holder:
    def method(self):
        return 1


async def coroutine():
    return 1


def generator():
    yield 1


def reads_module_globals(values):
    return np.asarray(values) * SCALE + helper(math.floor(1.5)) + undefined_name  # noqa: F821


def test_globals_the_server_lacks_are_refused_with_advice():
    with pytest.raises(ValueError) as raised:
        client.function(reads_module_globals)
    message = str(raised.value)
    assert message.startswith("reads_module_globals uses names that would be undefined")
    assert "np (a module: put 'import numpy as np' inside the function or in prelude)" in message
    assert "SCALE (of type int: pass it as an argument or define it inside)" in message
    assert "helper (defined beside it: add it to prelude=[..., helper])" in message
    assert "math (a module: put 'import math'" in message
    assert "undefined_name (not defined where reads_module_globals was either)" in message


def test_a_prelude_that_defines_the_globals_is_accepted():
    with pytest.raises(ValueError, match="undefined_name"):
        client.function(prelude=["import math", "import numpy as np", "SCALE = 3", helper])(
            reads_module_globals)
    # A star import could define anything, so nothing is refused.
    assert client.function(prelude="from math import *")(reads_module_globals)


def test_names_bound_remotely_or_not_evaluated_are_not_refused():
    def recursive(n: np.ndarray) -> np.ndarray:  # annotations are not evaluated remotely
        global counter
        counter = n
        return 1 if n == 0 else n * recursive(n - 1) + len(str(counter))

    assert client.function(recursive)

    def with_default(x, y=SCALE):
        return x + y

    with pytest.raises(ValueError, match="SCALE"):
        client.function(with_default)


def test_options_are_checked_when_decorating():
    with pytest.raises(ValueError, match="timeout_seconds must be a finite positive number"):
        client.function(timeout_seconds=0)(helper)
    with pytest.raises(TypeError, match="output_limit_bytes must be an int"):
        client.function(output_limit_bytes="1")(helper)
    with pytest.raises(TypeError, match="cpu_only must be a bool"):
        client.function(cpu_only="yes")(helper)
    with pytest.raises(SyntaxError):
        client.function(prelude=["def broken("])(helper)
    with pytest.raises(TypeError, match=r"prelude\[0\] is of type int"):
        client.function(prelude=[3])(helper)


# -- the program of one call ----------------------------------------------------------------------


def test_arguments_become_uploads_or_literals():
    @client.function(cpu_only=True)
    def f(a, b, *rest, key=None, **more):  # f def
        return a

    values = np.arange(3, dtype=np.float32)
    program = f.program(values, b"raw", {"$ref": "kcoral:loader"}, np.int64(2), values,
                        key=bytearray(b"k"), extra=[np.float32(0.5), None])
    instructions = program.instructions
    uploads = [(i["id"], i["kind"]) for i in instructions if i["op"] == "upload"]
    assert uploads == [("kcoral:loader", "module"), ("kcoral:source", "bytes"),
                       ("args[0]", "tensor"), ("args[1]", "bytes"), ("kwargs['key']", "bytes")]
    assert instructions[0]["source"] == LOADER_SOURCE
    get_function = next(i for i in instructions if i["op"] == "get_function")
    assert get_function["name"] == "call" and get_function["cpu_only"] is True
    run = next(i for i in instructions if i["op"] == "run")
    assert run["id"] == "f"
    source, layout, name, plan, *refs = run["args"]
    assert source == {"$ref": "kcoral:source"} and name == "f"
    # Compiled remotely as in this file, with annotations left unevaluated.
    assert layout == [[__file__, line_of("f def"), len(f.source),
                       __future__.annotations.compiler_flag]]
    # Literals sit inside the plan, where a {"$ref": ...} is data, not a reference.
    assert plan == {
        "args": [{"upload": 0}, {"upload": 1}, {"value": {"$ref": "kcoral:loader"}},
                 {"value": 2}, {"upload": 0}],
        "kwargs": {"key": {"upload": 2}, "extra": {"value": [0.5, None]}},
    }
    assert refs == [{"$ref": "args[0]"}, {"$ref": "args[1]"}, {"$ref": "kwargs['key']"}]
    assert instructions[-1] == {"op": "return", "key": "value", "value": {"$ref": "f"}}


def test_arguments_are_checked_before_anything_is_built():
    @client.function
    def pair(a, b):
        return [a, b]

    with pytest.raises(TypeError, match=r"pair\(\): missing a required argument: 'b'"):
        pair.program(1)
    with pytest.raises(TypeError, match=r"pair\(\) args\[0\]\[0\] is a ndarray inside a list"):
        pair.program([np.zeros(1)], 2)
    with pytest.raises(TypeError, match=r"pair\(\) args\[1\]\['k'\] is a object"):
        pair.program(1, {"k": object()})
    with pytest.raises(ValueError, match=r"pair\(\) args\[0\] holds a non-finite float"):
        pair.program(float("inf"), 2)
    with pytest.raises(ValueError, match=r"pair\(\) args\[0\]: unsupported tensor dtype"):
        pair.program(np.zeros(2, dtype=np.complex64), 2)


# -- run in this process ---------------------------------------------------------------------------


def test_run_local_executes_the_program_of_a_call():
    @client.function(prelude=["import math", helper])
    def stats(values, *, offset):
        return {"sum": values + offset, "total": values.sum(), "root": helper(math.sqrt(4))}

    result = run_local(stats.program(np.arange(3, dtype=np.int32), offset=1)).raise_for_error()
    value = result["value"]
    np.testing.assert_array_equal(value["sum"], [1, 2, 3])
    assert value["total"] == 3 and type(value["total"]) is int and value["root"] == 3.0


def test_prelude_text_is_compiled_with_annotations_left_unevaluated():
    # As the function's own source, and as the server compiles every uploaded module.
    @client.function(prelude="def scaled(x: Undefined) -> Undefined:\n    return 2 * x\n")
    def double(x):
        return [scaled(x), scaled.__annotations__]

    program = double.program(21)
    run = next(i for i in program.instructions if i["op"] == "run")
    assert [piece[3] for piece in run["args"][1]] == [__future__.annotations.compiler_flag] * 2
    value = run_local(program).raise_for_error()["value"]
    assert value == [42, {"x": "Undefined", "return": "Undefined"}]


def test_run_local_traceback_points_into_this_file():
    @client.function
    def fail(x):
        raise KeyError(x)  # local raise

    result = run_local(fail.program("missing"))
    with pytest.raises(RuntimeFailed) as raised:
        result.raise_for_error()
    assert raised.value.message == "KeyError: 'missing'"
    assert f'File "{__file__}", line {line_of("local raise")}, in fail' in raised.value.traceback
    assert "raise KeyError(x)  # local raise" in raised.value.traceback
    # Loading the module here did not spoil this process's view of its own source file.
    assert inspect.getsource(test_run_local_traceback_points_into_this_file).startswith("def ")
