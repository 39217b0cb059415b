"""Program: the client-side builder of one request, its instruction list and its blobs.

A program is built locally, without a server: each builder call validates its arguments,
snapshots what it uploads (bytes are copied when the call is made) and appends one wire
instruction. A call that raises leaves the program as it was. Binary uploads become
content-addressed blobs, named by SHA-256, that travel as separate multipart parts so the
server can cache them across requests.
"""

from __future__ import annotations

import copy
import math
import operator
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from kcoral._codec import Part, dumps_json, json_copy, multipart_chunks, sha256_hex
from kcoral._files import read_folder
from kcoral._paths import check_no_conflicts, normalize_path

# Wire dtype -> item size in bytes.
DTYPE_ITEM_SIZES: dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "float32": 4,
    "int64": 8, "float64": 8,
}  # fmt: skip

_UPLOAD_KINDS = ("module", "tensor", "bytes", "library")
# The most GPUs a program may ask for (options.gpu_count), as the protocol has it.
MAX_GPU_COUNT = 8


@dataclass(frozen=True)
class Register:
    """A name for the value an earlier instruction of the same program produced.

    Registers are request-local: they mean nothing to the server outside the program
    that made them. Pass them to later builder calls; on the wire they are
    ``{"$ref": id}``.
    """

    id: str


class Program:
    """An ordered, self-contained list of instructions and the blobs they upload.

    Usage::

        program = Program()
        module = program.upload(kind="module", source="def f(x):\\n    return x + 1\\n")
        f = program.get_function(module=module, name="f")
        program.return_(key="y", value=program.run(fn=f, args=[41]))

    Value-making calls take an optional ``id``; left out, one is made from the operation
    and a counter (``upload_0``, ``get_function_1``, ``run_2``). Ids and return keys must
    be unique. Only values selected by ``return_``, ``return_file`` or ``return_folder``
    come back. Not thread-safe; a Program may be executed any number of times.
    """

    def __init__(self) -> None:
        self._instructions: list[dict[str, Any]] = []
        self._blobs: dict[str, bytes] = {}
        self._ids: set[str] = set()
        self._return_keys: set[str] = set()
        self._file_paths: set[str] = set()
        self._next_auto_id = 0

    @property
    def instructions(self) -> list[dict[str, Any]]:
        """A copy of the wire instruction list; editing it does not change the program."""
        return copy.deepcopy(self._instructions)

    @property
    def blobs(self) -> Mapping[str, bytes]:
        """Read-only view of the uploaded blobs by lowercase hex SHA-256."""
        return MappingProxyType(self._blobs)

    def upload(
        self,
        *,
        id: str | None = None,
        kind: str,
        source: str | None = None,
        value: Any = None,
        language: str | None = None,
        dtype: str | None = None,
        shape: Sequence[int] | None = None,
    ) -> Register:
        """Upload a module's source, a tensor, bytes or a prebuilt library.

        - ``kind="module"``: ``source`` is the text; ``language`` is ``"python"`` (the
          default) or ``"cuda"``, whose text ``get_function`` hands to uploaded compiler
          code as an object with ``source`` and ``name``.
        - ``kind="tensor"``: ``value`` is a numpy array, a torch tensor (when the caller
          has imported torch), an object with ``__dlpack__``, or raw little-endian C-order
          bytes together with ``dtype`` and ``shape``.
        - ``kind="bytes"`` / ``kind="library"``: ``value`` is any bytes-like object; a
          library is a shared object exporting functions through TVM FFI.

        Raises TypeError for fields that do not fit the kind and ValueError for bad values.
        """
        if kind not in _UPLOAD_KINDS:
            raise ValueError(f"upload kind must be one of {', '.join(_UPLOAD_KINDS)}; not {kind!r}")
        if kind != "module" and (source is not None or language is not None):
            raise TypeError(f"a {kind} upload takes value=, not source= or language=")
        if kind != "tensor" and (dtype is not None or shape is not None):
            raise TypeError(f"dtype= and shape= apply to tensor uploads, not {kind} uploads")
        instruction: dict[str, Any] = {"op": "upload", "id": "", "kind": kind}
        blob: bytes | None = None
        if kind == "module":
            if not isinstance(source, str):
                raise TypeError("a module upload needs source= as a str")
            if value is not None:
                raise TypeError("a module upload takes source=, not value=")
            if language not in (None, "python", "cuda"):
                raise ValueError(f"module language must be 'python' or 'cuda', not {language!r}")
            instruction["source"] = source
            if language == "cuda":
                instruction["language"] = "cuda"
        elif kind == "tensor":
            wire_dtype, wire_shape, blob = _tensor_payload(value, dtype, shape)
            instruction.update(blob=sha256_hex(blob), dtype=wire_dtype, shape=wire_shape)
        else:
            blob = _bytes_like(value, f"a {kind} upload's value")
            instruction["blob"] = sha256_hex(blob)
        instruction["id"] = self._checked_id(id)
        return self._append(instruction, "upload", blob)

    def upload_file(self, *, blob: Any, path: str, id: str | None = None) -> Register:
        """Write bytes as a file at ``path`` in the program's working directory.

        The register holds the normalized path. Paths may not repeat or nest inside one
        another across file uploads.
        """
        data = _bytes_like(blob, "upload_file's blob")
        normalized = normalize_path(path)
        check_no_conflicts(self._file_paths, [normalized])
        instruction = _file_upload(self._checked_id(id), normalized, data)
        self._file_paths.add(normalized)
        return self._append(instruction, "upload", data)

    def upload_folder(self, folder: str | os.PathLike[str], *, path: str) -> None:
        """Upload every regular file under a local folder to ``path`` in the workspace.

        Files go as ``upload_file`` instructions, sorted by path, hidden files included;
        empty directories are not recreated. Symbolic links (the folder itself included)
        and special files are refused with ValueError, as the folder would otherwise not
        arrive as it is seen here.
        """
        destination = normalize_path(path)
        files = sorted(
            (normalize_path(f"{destination}/{relative}"), data)
            for relative, data in read_folder(folder)
        )
        check_no_conflicts(self._file_paths, [remote for remote, _ in files])
        for remote, data in files:
            self._file_paths.add(remote)
            self._append(_file_upload("", remote, data), "upload", data)

    def get_function(
        self,
        *,
        id: str | None = None,
        module: Register | Mapping[str, str],
        name: str,
        cpu_only: bool = False,
    ) -> Register:
        """Select the function ``name`` of an earlier module or library upload.

        ``cpu_only=True`` declares that runs of this function use no GPU: the worker
        releases the lease for them, and CUDA calls made anyway fail with ``gpu_access``.
        """
        reference = self._reference(module, "get_function's module")
        if not isinstance(name, str) or not name:
            raise ValueError("get_function needs a non-empty function name")
        if not isinstance(cpu_only, bool):
            raise TypeError("cpu_only must be a bool")
        instruction: dict[str, Any] = {
            "op": "get_function",
            "id": self._checked_id(id),
            "module": reference,
            "name": name,
        }
        if cpu_only:
            instruction["cpu_only"] = True
        return self._append(instruction, "get_function", None)

    def run(
        self,
        *,
        id: str | None = None,
        fn: Register | Mapping[str, str],
        args: Sequence[Any] | None = None,
    ) -> Register:
        """Call ``fn`` with positional ``args`` and name the value it returns.

        A top-level argument that is a Register passes that value. Anything else is sent
        as JSON, copied now: None, bool, int, finite float, str, lists/tuples and dicts
        with str keys. Registers nested inside lists or dicts are refused, since the
        server resolves references only at the top level.
        """
        reference = self._reference(fn, "run's fn")
        if args is None:
            args = []
        if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
            raise TypeError("run's args must be a list or tuple")
        wire_args = [
            self._reference(arg, f"run argument {i}")
            if isinstance(arg, Register) or _is_reference(arg)
            else json_copy(arg, f"run argument {i}")
            for i, arg in enumerate(args)
        ]
        instruction = {"op": "run", "id": self._checked_id(id), "fn": reference, "args": wire_args}
        return self._append(instruction, "run", None)

    def return_(self, *, key: str, value: Register | Mapping[str, str]) -> None:
        """Send the value of ``value`` back as ``results[key]``.

        A return made before a later failure stays in the (failed) result.
        """
        reference = self._reference(value, f"return {key!r}")
        self._add_return({"op": "return", "key": self._checked_key(key), "value": reference})

    def return_file(self, *, key: str, path: str | Register) -> None:
        """Send back the regular file at ``path`` (a literal or a Register holding one)."""
        self._return_path(key, "file", path)

    def return_folder(self, *, key: str, path: str | Register) -> None:
        """Send back the folder at ``path``: its files (hidden too) and empty directories."""
        self._return_path(key, "folder", path)

    def to_request(
        self,
        include_blobs: set[str] | None = None,
        *,
        timeout_seconds: float | None = None,
        output_limit_bytes: int | None = None,
        gpu_count: int | None = None,
    ) -> tuple[str, bytes]:
        """Encode the POST /execute body: returns (Content-Type header, body bytes).

        ``include_blobs`` selects the blob parts to send by SHA-256; ``None`` sends all.
        The options are left out when ``None`` so the server applies its defaults.
        """
        content_type, chunks = self._request_chunks(
            include_blobs,
            timeout_seconds=timeout_seconds,
            output_limit_bytes=output_limit_bytes,
            gpu_count=gpu_count,
        )
        return content_type, b"".join(chunks)

    def _request_chunks(
        self,
        include_blobs: set[str] | None,
        *,
        timeout_seconds: float | None,
        output_limit_bytes: int | None,
        gpu_count: int | None = None,
    ) -> tuple[str, list[bytes | memoryview]]:
        """:meth:`to_request`'s body as pieces, the blobs among them uncopied."""
        if not self._instructions:
            raise ValueError("a program needs at least one instruction")
        wanted = set(self._blobs) if include_blobs is None else set(include_blobs)
        unknown = wanted - self._blobs.keys()
        if unknown:
            raise ValueError(f"this program has no blobs {sorted(unknown)}")
        options: dict[str, Any] = {}
        if timeout_seconds is not None:
            if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)):
                raise TypeError("timeout_seconds must be a number")
            if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
                raise ValueError("timeout_seconds must be a finite positive number")
            options["timeout_seconds"] = timeout_seconds
        if output_limit_bytes is not None:
            if isinstance(output_limit_bytes, bool) or not isinstance(output_limit_bytes, int):
                raise TypeError("output_limit_bytes must be an int")
            if output_limit_bytes < 0:
                raise ValueError("output_limit_bytes must be >= 0")
            options["output_limit_bytes"] = output_limit_bytes
        if gpu_count is not None:
            if isinstance(gpu_count, bool) or not isinstance(gpu_count, int):
                raise TypeError("gpu_count must be an int")
            if not 1 <= gpu_count <= MAX_GPU_COUNT:
                raise ValueError(f"gpu_count must be between 1 and {MAX_GPU_COUNT}")
            options["gpu_count"] = gpu_count
        document: dict[str, Any] = {"instructions": self._instructions}
        if options:
            document["options"] = options
        parts = [Part("program", "application/json", dumps_json(document))]
        parts += [
            Part(f"blob:{digest}", "application/octet-stream", data)
            for digest, data in self._blobs.items()
            if digest in wanted
        ]
        return multipart_chunks(parts)

    # -- internals ---------------------------------------------------------------------

    def _checked_id(self, id: str | None) -> str:
        """The id a new instruction gets; commits nothing ("" asks for an automatic one)."""
        if id is None:
            return ""
        if not isinstance(id, str) or not id:
            raise ValueError("an instruction id must be a non-empty str")
        if id in self._ids:
            raise ValueError(f"duplicate instruction id {id!r}")
        return id

    def _append(self, instruction: dict[str, Any], op: str, blob: bytes | None) -> Register:
        if not instruction["id"]:
            # One counter across operations, skipping ids the user already took.
            while f"{op}_{self._next_auto_id}" in self._ids:
                self._next_auto_id += 1
            instruction["id"] = f"{op}_{self._next_auto_id}"
            self._next_auto_id += 1
        self._ids.add(instruction["id"])
        if blob is not None:
            self._blobs.setdefault(instruction["blob"], blob)
        self._instructions.append(instruction)
        return Register(instruction["id"])

    def _reference(self, value: Any, what: str) -> dict[str, str]:
        if isinstance(value, Register):
            target = value.id
        elif _is_reference(value):
            target = value["$ref"]
        else:
            raise TypeError(f"{what} must be a Register (or {{'$ref': id}}), not {value!r}")
        if target not in self._ids:
            raise ValueError(f"{what} refers to {target!r}, which no earlier instruction made")
        return {"$ref": target}

    def _checked_key(self, key: str) -> str:
        if not isinstance(key, str) or not key:
            raise ValueError("a return key must be a non-empty str")
        if key in self._return_keys:
            raise ValueError(f"duplicate return key {key!r}")
        return key

    def _return_path(self, key: str, kind: str, path: str | Register) -> None:
        wire_path: Any
        if isinstance(path, str):
            wire_path = normalize_path(path)
        else:
            wire_path = self._reference(path, f"return {key!r} path")
        self._add_return(
            {"op": "return", "key": self._checked_key(key), "kind": kind, "path": wire_path}
        )

    def _add_return(self, instruction: dict[str, Any]) -> None:
        self._return_keys.add(instruction["key"])
        self._instructions.append(instruction)


def _file_upload(id: str, path: str, data: bytes) -> dict[str, Any]:
    return {"op": "upload", "id": id, "kind": "file", "blob": sha256_hex(data), "path": path}


def _is_reference(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"$ref"} and isinstance(value["$ref"], str)


def _bytes_like(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    try:
        return memoryview(value).tobytes()
    except TypeError:
        raise TypeError(f"{what} must be bytes-like, not {type(value).__name__}") from None


def _checked_shape(shape: Any) -> list[int]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError("a tensor shape must be a list or tuple of ints")
    dims: list[int] = []
    for dim in shape:
        if isinstance(dim, bool) or not hasattr(dim, "__index__"):
            raise TypeError(f"a tensor shape must hold ints, not {list(shape)!r}")
        dims.append(operator.index(dim))
    if any(d < 0 for d in dims):
        raise ValueError(f"a tensor shape must hold non-negative ints, not {dims}")
    return dims


def _tensor_payload(value: Any, dtype: Any, shape: Any) -> tuple[str, list[int], bytes]:
    """(wire dtype, shape, little-endian C-order bytes) of a tensor upload's value."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        if dtype is None or shape is None:
            raise TypeError("a tensor given as raw bytes needs dtype= and shape=")
        wire_dtype, wire_shape, data = dtype, _checked_shape(shape), memoryview(value).tobytes()
    else:
        wire_dtype, wire_shape, data = _array_payload(value)
        if dtype is not None and dtype != wire_dtype:
            raise ValueError(f"dtype={dtype!r} does not match the value's dtype {wire_dtype!r}")
        if shape is not None and _checked_shape(shape) != wire_shape:
            raise ValueError(f"shape={list(shape)!r} does not match the value's {wire_shape}")
    if wire_dtype not in DTYPE_ITEM_SIZES:
        raise ValueError(
            f"unsupported tensor dtype {wire_dtype!r}; use one of {', '.join(DTYPE_ITEM_SIZES)}"
        )
    expected = math.prod(wire_shape) * DTYPE_ITEM_SIZES[wire_dtype]
    if len(data) != expected:
        raise ValueError(
            f"a {wire_dtype} tensor of shape {wire_shape} takes {expected} bytes, got {len(data)}"
        )
    return wire_dtype, wire_shape, data


def _array_payload(value: Any) -> tuple[str, list[int], bytes]:
    # torch is consulted only if the caller imported it: importing it here would cost
    # seconds and a dependency the client does not otherwise need.
    torch: Any = sys.modules.get("torch")
    tensor_type: Any = getattr(torch, "Tensor", None)
    if tensor_type is not None and isinstance(value, tensor_type):
        tensor = value.detach().cpu().contiguous()
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        return str(tensor.dtype).removeprefix("torch."), list(tensor.shape), data
    if not isinstance(value, np.ndarray):
        if not hasattr(value, "__dlpack__"):
            raise TypeError(
                f"cannot upload a {type(value).__name__} as a tensor; pass a numpy array, a "
                "torch tensor, an object with __dlpack__, or bytes with dtype= and shape="
            )
        try:
            value = np.from_dlpack(value)
        except Exception as error:  # each DLPack producer raises its own kinds
            raise TypeError(
                f"cannot read the {type(value).__name__} through DLPack into host memory: {error}"
            ) from error
    if value.dtype.byteorder == ">" or (value.dtype.byteorder == "=" and sys.byteorder == "big"):
        value = value.astype(value.dtype.newbyteorder("<"))
    return value.dtype.name, [int(d) for d in value.shape], value.tobytes(order="C")
