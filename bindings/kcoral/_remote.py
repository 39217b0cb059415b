"""Remote functions: a local ``def`` that runs on the server, made by ``Client.function``.

Only source travels. The function's source (dedented, its decorators dropped) and the
``prelude`` pieces before it form a module that is uploaded as a ``bytes`` blob, so the
server's content-addressed cache keeps it: after the first call, a call sends the program
without the module and the server answers from its cache. A small fixed loader module,
uploaded with every call, executes that text in a fresh module (each piece compiled under
its own file name and line numbers, so remote tracebacks point into the caller's files)
and calls the function with the arguments.

Arguments travel as the protocol allows: arrays and tensors as tensor uploads, bytes-like
values as bytes uploads (all content-addressed too), anything else as a JSON literal.
Keyword arguments travel as well, because the loader, not the ``run`` instruction, makes
the call.

What cannot work is refused when the function is decorated, not when it is called:
lambdas, methods, coroutines and generators, functions without source, closures, and
global names the uploaded module would not define.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import functools
import inspect
import symtable
import sys
import tokenize
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec

import numpy as np

from kcoral._codec import json_copy
from kcoral._errors import program_failed
from kcoral._program import Program, Register
from kcoral._result import ProgramResult

if TYPE_CHECKING:
    from kcoral._client import Client

P = ParamSpec("P")

# The key under which a remote function's program returns the function's value.
RESULT_KEY = "value"

# Function and prelude source is compiled with postponed annotations (PEP 563): an
# annotation such as ``np.ndarray`` names a type the caller imported, which the server need
# not have bound. The server compiles every uploaded module so too.
_POSTPONED_ANNOTATIONS = __future__.annotations.compiler_flag

# Uploaded with every call (it is small and fixed). ``call`` receives the module text, its
# layout (per piece: file name, first line, length in characters, compiler flags), the
# function's name, the argument plan (JSON: a literal, or an index into ``uploads``) and
# the uploaded arguments. numpy scalars in the result become Python numbers, which the
# protocol can return.
LOADER_SOURCE = '''\
"""Loads a module sent by a kcoral client as text and calls one of its functions."""

import ast
import linecache
import sys
import types

_MAX_DEPTH = 256


def call(source, layout, name, plan, *uploads):
    function = _load(bytes(source).decode("utf-8"), layout)[name]
    args = [_argument(entry, uploads) for entry in plan["args"]]
    kwargs = {key: _argument(entry, uploads) for key, entry in plan["kwargs"].items()}
    value = function(*args, **kwargs)
    return _plain(value, 0)


def _load(text, layout):
    module = types.ModuleType("__kcoral_remote__")
    sys.modules[module.__name__] = module
    files = {}
    start = 0
    for filename, first_line, length, flags in layout:
        piece = text[start:start + length]
        start += length
        # Tracebacks and inspect.getsource read lines through linecache. Where the file
        # here lacks the piece (usually it does not exist), the piece is laid over it in
        # an entry whose None mtime keeps linecache.checkcache from dropping it.
        if filename not in files:
            files[filename] = list(linecache.getlines(filename))
        lines = files[filename]
        piece_lines = [line + "\\n" for line in piece[:-1].split("\\n")]
        end = first_line - 1 + len(piece_lines)
        if lines[first_line - 1:end] != piece_lines:
            lines.extend(["\\n"] * (end - len(lines)))
            lines[first_line - 1:end] = piece_lines
            linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        tree = compile(piece, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        ast.increment_lineno(tree, first_line - 1)
        exec(compile(tree, filename, "exec", flags, dont_inherit=True), module.__dict__)
    return module.__dict__


def _argument(entry, uploads):
    return uploads[entry["upload"]] if "upload" in entry else entry["value"]


def _plain(value, depth):
    numpy = sys.modules.get("numpy")
    if numpy is None or depth > _MAX_DEPTH:
        return value
    if isinstance(value, (numpy.bool_, numpy.number)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    return value
'''


@dataclass(frozen=True)
class SourcePiece:
    """A stretch of the uploaded module: its text and where that text came from.

    ``first_line`` is the line of ``filename`` where ``source`` starts; ``flags`` are the
    compiler flags (``__future__`` features) to compile it with. A function's piece names
    it and the variables it took from an enclosing function, which the module must define.
    """

    source: str
    filename: str
    first_line: int
    flags: int
    name: str = ""
    free_variables: tuple[str, ...] = ()


class RemoteFunction(Generic[P]):
    """A function that runs on a kcoral server; made by :meth:`Client.function`.

    Usage::

        @client.function(timeout_seconds=60)
        def add(a, b):
            return a + b

        add(np.arange(3), 1)          # array([1, 2, 3]), computed on the server
        add.call(np.arange(3), 1)     # the whole ProgramResult (timings, stdout, stderr)

    Calling it executes one program and returns the function's value, decoded as
    ``ProgramResult.results`` values are; a failed program raises what
    :meth:`ProgramResult.raise_for_error` raises. ``source`` is the module text uploaded.
    Holds no per-call state: calls from several threads are as safe as the Client's.
    """

    # Declared here: __init__ reads them from another RemoteFunction before setting its own.
    _function: Callable[P, Any]
    _pieces: tuple[SourcePiece, ...]

    def __init__(
        self,
        client: Client,
        function: Callable[P, Any],
        *,
        timeout_seconds: float | None = None,
        output_limit_bytes: int | None = None,
        cpu_only: bool = False,
        prelude: str | Sequence[str | Callable[..., Any]] = (),
    ) -> None:
        if not isinstance(cpu_only, bool):
            raise TypeError("cpu_only must be a bool")
        _check_options(timeout_seconds, output_limit_bytes)
        inherited: Sequence[SourcePiece] = ()
        if isinstance(function, RemoteFunction):  # e.g. the same function for another client
            inherited, main = function._pieces[:-1], function._pieces[-1]
            function = function._function
        else:
            main = function_piece(function, keep_decorators=False)
        pieces = [*inherited, *prelude_pieces(prelude), main]
        check_global_names(function, pieces)
        self._client = client
        self._function = function
        self._signature = inspect.signature(function)
        self._name = function.__code__.co_name
        self._options: dict[str, Any] = {
            "timeout_seconds": timeout_seconds,
            "output_limit_bytes": output_limit_bytes,
        }
        self._cpu_only = cpu_only
        self._pieces = tuple(pieces)
        self._source = "".join(piece.source for piece in pieces)
        self._source_bytes = self._source.encode("utf-8")
        self._layout = [
            [piece.filename, piece.first_line, len(piece.source), piece.flags] for piece in pieces
        ]
        functools.update_wrapper(self, function)

    @property
    def source(self) -> str:
        """The module text uploaded: the prelude pieces, then the function's own source."""
        return self._source

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Run the function on the server and return its value.

        Raises the :class:`ProgramFailed` subclass of the failure, carrying the remote
        traceback (also added as a note, so it prints with the local one), and whatever
        :meth:`Client.execute` raises (e.g. :class:`ExecutionTimeout`).
        """
        result = self.call(*args, **kwargs)
        if not result.completed:
            error = program_failed(result)  # what result.raise_for_error() raises
            if error.traceback and hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"Remote traceback:\n{error.traceback.rstrip()}")
            raise error
        return result.results[RESULT_KEY]

    def call(self, *args: P.args, **kwargs: P.kwargs) -> ProgramResult:
        """Run the function on the server and return the whole :class:`ProgramResult`.

        The value is ``result["value"]``. As with :meth:`Client.execute`, a failed program
        is returned, not raised.
        """
        return self._client.execute(self.program(*args, **kwargs), **self._options)

    def program(self, *args: P.args, **kwargs: P.kwargs) -> Program:
        """The :class:`Program` one call executes (e.g. for ``run_local``).

        Raises TypeError when the arguments do not fit the function's signature or cannot
        travel, before anything is sent.
        """
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{self._name}(): {error}") from None
        program = Program()
        loader = program.upload(id="kcoral:loader", kind="module", source=LOADER_SOURCE)
        source = program.upload(id="kcoral:source", kind="bytes", value=self._source_bytes)
        call = program.get_function(
            id="kcoral:call", module=loader, name="call", cpu_only=self._cpu_only
        )
        arguments = _Arguments(program, self._name)
        plan = {
            "args": [arguments.entry(value, f"args[{i}]") for i, value in enumerate(args)],
            "kwargs": {
                key: arguments.entry(value, f"kwargs[{key!r}]") for key, value in kwargs.items()
            },
        }
        value = program.run(
            id=self._name,
            fn=call,
            args=[source, self._layout, self._name, plan, *arguments.uploads],
        )
        program.return_(key=RESULT_KEY, value=value)
        return program

    def __repr__(self) -> str:
        return f"<RemoteFunction {self._function.__qualname__}>"


class _Arguments:
    """Turns one call's arguments into uploads (arrays, tensors, bytes) and JSON literals."""

    def __init__(self, program: Program, function_name: str) -> None:
        self.uploads: list[Register] = []
        self._program = program
        self._name = function_name
        self._upload_of: dict[int, int] = {}  # id(value) -> index; values outlive the call

    def entry(self, value: Any, where: str) -> dict[str, Any]:
        """The plan entry of one argument: ``{"upload": index}`` or ``{"value": literal}``."""
        if id(value) in self._upload_of:
            return {"upload": self._upload_of[id(value)]}
        kind = _upload_kind(value)
        if kind is None:
            literal = self._literal(value, where, set())
            return {"value": json_copy(literal, f"{self._name}() {where}")}
        try:
            register = self._program.upload(id=where, kind=kind, value=value)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{self._name}() {where}: {error}") from None
        self._upload_of[id(value)] = len(self.uploads)
        self.uploads.append(register)
        return {"upload": len(self.uploads) - 1}

    def _literal(self, value: Any, where: str, active: set[int]) -> Any:
        """``value`` with numpy scalars made Python numbers; refuses what JSON cannot hold."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (np.bool_, np.number)):
            return value.item()
        if isinstance(value, (list, tuple, dict)):
            if id(value) in active:
                raise ValueError(f"{self._name}() {where} contains itself")
            active.add(id(value))
            try:
                if isinstance(value, dict):
                    return {
                        key: self._literal(item, f"{where}[{key!r}]", active)
                        for key, item in value.items()
                    }
                return [
                    self._literal(item, f"{where}[{i}]", active) for i, item in enumerate(value)
                ]
            finally:
                active.discard(id(value))
        if _upload_kind(value) is not None:
            raise TypeError(
                f"{self._name}() {where} is a {type(value).__name__} inside a list or dict: "
                "arrays, tensors and bytes travel only as arguments of their own"
            )
        raise TypeError(
            f"{self._name}() {where} is a {type(value).__name__}, which cannot travel: pass "
            "arrays, tensors, bytes, or JSON-like values (None, bool, int, float, str, and "
            "lists and str-keyed dicts of them)"
        )


def _upload_kind(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, np.ndarray) or hasattr(value, "__dlpack__"):
        return "tensor"
    torch: Any = sys.modules.get("torch")  # consulted only when the caller imported it
    if torch is not None and isinstance(value, torch.Tensor):
        return "tensor"
    return None


def _check_options(timeout_seconds: float | None, output_limit_bytes: int | None) -> None:
    """Apply Client.execute's checks of its options now rather than at the first call."""
    probe = Program()
    probe.upload(kind="bytes", value=b"")
    probe.to_request(set(), timeout_seconds=timeout_seconds, output_limit_bytes=output_limit_bytes)


# -- source --------------------------------------------------------------------------------


def function_piece(function: Any, *, keep_decorators: bool) -> SourcePiece:
    """The source of a function (or, for a prelude, a class) that can stand alone remotely.

    ``keep_decorators=False`` (the remote function itself) drops the decorator lines:
    the decorator that made the remote function must not run again on the server.
    Raises TypeError for what is not a plain ``def`` function and ValueError for one
    whose source cannot stand alone.
    """
    is_class = keep_decorators and inspect.isclass(function)
    target = inspect.unwrap(function) if keep_decorators else function
    if not is_class:
        _check_function(target, decorated=not keep_decorators)
    name = target.__name__ if is_class else target.__code__.co_name
    try:
        lines, first_line = inspect.getsourcelines(target)
    except (OSError, TypeError) as error:
        raise ValueError(
            f"the source of {name} is not available ({error}); only source travels, so "
            "define it in a file: a module, a script or a notebook cell (not at the "
            "interactive prompt or through exec)"
        ) from None
    filename = inspect.getsourcefile(target) if is_class else target.__code__.co_filename
    lines = dedent_source(lines)
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError as error:
        raise ValueError(
            f"the source of {name} in {filename} does not parse ({error.msg}); was the file "
            "edited after it was imported?"
        ) from None
    node = tree.body[0] if tree.body else None
    kinds = (ast.ClassDef,) if is_class else (ast.FunctionDef, ast.AsyncFunctionDef)
    if not isinstance(node, kinds) or node.name != name:
        raise ValueError(
            f"the source found for {name} at {filename}:{first_line} is not its definition; "
            "was the file edited after it was imported?"
        )
    start = 1 if keep_decorators else node.lineno
    end = node.end_lineno or len(lines)
    return SourcePiece(
        source="".join(lines[start - 1 : end]),
        filename=filename or "<unknown>",
        first_line=max(first_line, 1) + start - 1,
        flags=_POSTPONED_ANNOTATIONS,
        name=name,
        free_variables=() if is_class else target.__code__.co_freevars,
    )


def _check_function(function: Any, *, decorated: bool) -> None:
    if decorated and hasattr(function, "__wrapped__"):
        raise TypeError(
            f"{getattr(function, '__name__', function)} was wrapped by another decorator, which "
            "would not travel: make @client.function the innermost decorator, directly above def"
        )
    if not inspect.isfunction(function):
        raise TypeError(
            f"{function!r} is not a function defined with def; only such functions can run "
            "remotely"
        )
    name = function.__code__.co_name
    if name == "<lambda>":
        raise TypeError(
            "a lambda cannot run remotely: its source is part of a larger expression and it "
            "has no name to call; define it with def"
        )
    scope = function.__qualname__.split(".")[:-1]
    if scope and scope[-1] != "<locals>":
        raise TypeError(
            f"{function.__qualname__} is defined in class {scope[-1]}; a method cannot run "
            "remotely, since its instance does not travel: define a function outside the class"
        )
    if decorated:
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            raise TypeError(f"{name} is async; a remote function must be a plain def")
        if inspect.isgeneratorfunction(function):
            raise TypeError(
                f"{name} is a generator function, and a generator cannot be sent back; "
                "return a list instead"
            )


def dedent_source(lines: Sequence[str]) -> list[str]:
    """Lines without the first line's indentation, except lines inside string literals.

    Unlike ``textwrap.dedent``, this leaves the text of multi-line strings as it was.
    """
    first = lines[0] if lines else ""
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return list(lines)
    continued: set[int] = set()  # 0-based indices of lines that start inside a token
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            continued.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass  # the parse that follows says what is wrong
    return [
        line[len(indent) :] if i not in continued and line.startswith(indent) else line
        for i, line in enumerate(lines)
    ]


def prelude_pieces(prelude: str | Sequence[str | Callable[..., Any]]) -> Iterator[SourcePiece]:
    """The pieces of module source placed before the function, checked to compile."""
    if isinstance(prelude, str):
        prelude = [prelude]
    if not isinstance(prelude, Sequence):
        raise TypeError("prelude must be a str or a list of str, functions and classes")
    for index, item in enumerate(prelude):
        if isinstance(item, str):
            filename = f"<prelude[{index}]>"
            source = item if item.endswith("\n") else item + "\n"
            # A SyntaxError shows here.
            compile(source, filename, "exec", _POSTPONED_ANNOTATIONS, dont_inherit=True)
            yield SourcePiece(
                source=source, filename=filename, first_line=1, flags=_POSTPONED_ANNOTATIONS
            )
        elif isinstance(item, RemoteFunction):
            yield from item._pieces
        elif callable(item):
            yield function_piece(item, keep_decorators=True)
        else:
            raise TypeError(
                f"prelude[{index}] is of type {type(item).__name__}; give source text, a "
                "function or a class"
            )


def check_global_names(function: Callable[..., Any], pieces: Sequence[SourcePiece]) -> None:
    """Refuse names that the uploaded module would not define on the server.

    A closure's variables do not travel, so a function's free variables must be defined
    by the module (a helper that the prelude defines, say). A global name (a module the
    caller imported at top level, a constant, a helper) would fail with NameError
    remotely, at every call; saying so now, with what to do, is kinder. A star import in
    the prelude could define any name, so then nothing is refused.
    """
    bound: set[str] = set()
    used: list[str] = []
    for piece in pieces:
        source = piece.source
        if piece.flags & _POSTPONED_ANNOTATIONS:
            source = "from __future__ import annotations\n" + source
        if any(
            isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names)
            for node in ast.parse(source).body
        ):
            return
        top = symtable.symtable(source, piece.filename, "exec")
        for symbol in top.get_symbols():
            if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
                bound.add(symbol.get_name())
            if symbol.is_referenced():
                used.append(symbol.get_name())
        for table in _nested_tables(top):
            for symbol in table.get_symbols():
                if symbol.is_declared_global() and symbol.is_assigned():
                    bound.add(symbol.get_name())
                if symbol.is_global() and symbol.is_referenced():
                    used.append(symbol.get_name())
    for piece in pieces:
        enclosed = [name for name in piece.free_variables if name not in bound]
        if enclosed:
            raise ValueError(
                f"{piece.name} uses {', '.join(enclosed)} from the function enclosing it; "
                "only source travels, so a closure's variables would be missing on the "
                f"server: pass them as arguments, define them inside {piece.name}, or put "
                "them (helpers, constants) in the prelude"
            )
    known = bound | set(dir(builtins))
    missing = [
        name
        for name in dict.fromkeys(used)
        if name not in known and not (name.startswith("__") and name.endswith("__"))
    ]
    if missing:
        hints = "; ".join(_global_hint(name, function) for name in missing)
        raise ValueError(
            f"{function.__code__.co_name} uses names that would be undefined on the server, "
            f"where only its source and its prelude run: {hints}"
        )


def _nested_tables(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    for child in table.get_children():
        yield child
        yield from _nested_tables(child)


def _global_hint(name: str, function: Callable[..., Any]) -> str:
    namespace = getattr(function, "__globals__", {})
    if name not in namespace:
        return f"{name} (not defined where {function.__name__} was either)"
    value = namespace[name]
    if isinstance(value, types.ModuleType):
        statement = f"import {value.__name__}" + ("" if value.__name__ == name else f" as {name}")
        return f"{name} (a module: put {statement!r} inside the function or in prelude)"
    module = getattr(value, "__module__", None)
    if callable(value) and isinstance(module, str) and module != function.__module__:
        real = getattr(value, "__name__", name)
        statement = f"from {module} import {real}" + ("" if real == name else f" as {name}")
        return f"{name} (put {statement!r} inside the function or in prelude)"
    if inspect.isfunction(value) or inspect.isclass(value):
        return f"{name} (defined beside it: add it to prelude=[..., {name}])"
    return f"{name} (of type {type(value).__name__}: pass it as an argument or define it inside)"
