"""Python-side helpers of the kcoral executor.

The C++ executor drives a program; what is about Python objects themselves lives here,
where it reads best: loading an uploaded module, making and exporting tensors, and
encoding a returned value as the typed value tree of the protocol. The file is embedded
into libkcoral at build time and imported as the private module ``_kcoral_executor``.
"""

from __future__ import annotations

import __future__
import contextlib
import gc
import importlib
import platform
import sys
import types
from collections.abc import Iterator
from json import JSONEncoder as _JSONEncoder
from math import isfinite as _isfinite

_ITEM_SIZES = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "float32": 4, "int64": 8, "float64": 8,
}
_EXTENDED_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
# What one response carries, as the server's front checks it too: containers nested at most
# this deep (kMaxReturnedValueDepth), at most this many binary values (kMaxResultParts), and
# integers of at most this many digits (Python's own default for int <-> str, which the
# client's reader keeps, so a program that lifts it in its own process still gets results
# every client can read).
_MAX_DEPTH = 256
_MAX_PARTS = 1 << 20
_MAX_INT_DIGITS = 4300
_INT_BOUND = 10**_MAX_INT_DIGITS
# Bound when the worker starts, before any uploaded code runs: a program that replaces
# json.dumps must not change how its results are encoded (the digests are the executor's).
_ENCODE_JSON = _JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# The compiler flag of ``from __future__ import annotations``: see compile_module.
_POSTPONED_ANNOTATIONS = __future__.annotations.compiler_flag


# Each names its error kind (kcoral_error_kind, PythonError::declared_kind), which is how
# the executor tells them apart.
class SerializationError(Exception):
    """A returned value the protocol cannot carry."""

    kcoral_error_kind = "serialization"


class ResponseTooLarge(Exception):
    """Returned binary data past the server's response limit (a request error, 500)."""

    kcoral_error_kind = "response_too_large"


class Unavailable(LookupError):
    """What an upload needs is not installed in the worker environment."""

    kcoral_error_kind = "unavailable"


def compile_module(path: str, source: str) -> types.CodeType:
    """Uploaded source compiled as the file ``path`` (where it also lives), before the
    GPU lease is taken: compiling needs no GPU.

    Compiled as under ``from __future__ import annotations`` (PEP 563), and with no other
    future feature, for compatibility with programs written for the reference server: its
    loader (``materialize_module`` in kcoral/runtime/python.py) calls ``compile()`` from a
    module that has that import, and ``compile()`` passes the caller's future features on.
    So there annotations stay strings, and a program may annotate with a name not defined
    where the annotation stands (``T.Buffer((N,), ...)`` of a TIRx kernel, a forward
    reference, a local of an enclosing function defined later) and still run.
    """
    return compile(source, path, "exec", flags=_POSTPONED_ANNOTATIONS, dont_inherit=True)


def load_module(name: str, path: str, code: types.CodeType) -> types.ModuleType:
    """Execute compiled uploaded source as a real module, registered in sys.modules.

    The source also lives at ``path``, so tracebacks, ``inspect.getsource`` (which kernel
    DSLs read their functions through) and pickling all work as for an imported module.
    """
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def cuda_source(source: str, name: str) -> types.SimpleNamespace:
    """The value of get_function on a CUDA C upload, for uploaded compiler code."""
    return types.SimpleNamespace(source=source, name=name)


def _numpy_dtype(name: str):
    import numpy

    if name in _EXTENDED_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise Unavailable(
                f"{name} tensors need the ml_dtypes package in the worker environment"
            ) from None
        return numpy.dtype(getattr(ml_dtypes, name))
    return numpy.dtype(name).newbyteorder("<")


def make_tensor(buffer, dtype: str, shape: list[int], offset: int):
    """A writable numpy array over ``buffer`` from ``offset`` (a private copy-on-write
    mapping, or a copy)."""
    import numpy

    if buffer is None:
        return numpy.zeros(shape, dtype=_numpy_dtype(dtype))
    return numpy.frombuffer(buffer, dtype=_numpy_dtype(dtype), offset=offset).reshape(shape)


def prepare_cuda() -> None:
    """Let torch, when installed, set itself up on the current CUDA context now rather than
    inside the first program."""
    try:
        import torch
    except ImportError:
        return
    torch.cuda.init()
    # What nearly every program does first, done here instead, where it costs no program
    # anything: a host-to-device copy, an elementwise kernel, a reduction, a copy back.
    values = torch.arange(256, dtype=torch.float32).to("cuda")
    (values + 1).sum().item()
    torch.cuda.synchronize()


def empty_cuda_tensor(dtype: str, shape: list[int]):
    """A CUDA torch tensor for an upload's bytes, which the executor copies into it."""
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")


def load_library(path: str):
    """A TVM FFI module from a shared library; its functions are its __tvm_ffi_<name> exports."""
    import tvm_ffi

    return tvm_ffi.load_module(path)


def library_function(module, name: str):
    return module.get_function(name)


def _export_tensor(value):
    """(dtype, shape, byte view) for a numpy array or torch tensor, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in _ITEM_SIZES:
            raise SerializationError(f"cannot return a torch tensor of dtype {dtype}")
        shape = [int(extent) for extent in tensor.shape]
        return dtype, shape, memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        dtype = value.dtype.name
        if dtype not in _ITEM_SIZES or value.dtype.hasobject:
            raise SerializationError(f"cannot return a numpy array of dtype {value.dtype}")
        # Not ascontiguousarray: it turns a 0-d array into a 1-d one.
        array = value if value.flags.c_contiguous else value.copy(order="C")
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        shape = [int(extent) for extent in array.shape]
        return dtype, shape, memoryview(array.reshape(-1).view(numpy.uint8))
    return None


class _Encoder:
    def __init__(self, first_part: int, budget_bytes: int) -> None:
        self.next_part = first_part
        self.budget_bytes = budget_bytes
        self.parts: list[memoryview] = []
        self._nodes: list[dict] = []  # the binary values' nodes, in the order of `parts`
        self._active: set[int] = set()

    def binary(self, node: dict, data: memoryview, where: str) -> dict:
        """`node` of a binary value, with its part; its "sha256" is filled in by digested()."""
        if data.nbytes > self.budget_bytes:
            raise ResponseTooLarge(
                f"{where}: returning {data.nbytes} more bytes would exceed the server's "
                "response limit"
            )
        if self.next_part >= _MAX_PARTS:
            raise SerializationError(
                f"{where}: a response carries at most {_MAX_PARTS} binary values (bytes, "
                "tensors, files); return fewer, larger ones"
            )
        self.budget_bytes -= data.nbytes
        self.parts.append(data)
        self._nodes.append(node)
        node["part"] = f"return:{self.next_part}"
        self.next_part += 1
        return node

    def digested(self, digests: list) -> None:
        """Gives each binary node the SHA-256 of its part, in the order of `parts`."""
        if len(digests) != len(self._nodes):
            raise SerializationError("internal: a digest for each binary part was expected")
        for node, digest in zip(self._nodes, digests):
            node["sha256"] = digest

    def encode(self, value, where: str, depth: int = 0) -> dict:
        if depth > _MAX_DEPTH:
            raise SerializationError(f"{where}: nested deeper than {_MAX_DEPTH} levels")
        if value is None:
            return {"type": "null"}
        if isinstance(value, bool):
            return {"type": "boolean", "value": bool(value)}
        if isinstance(value, int):
            if not -_INT_BOUND < value < _INT_BOUND:
                raise SerializationError(
                    f"{where}: cannot return an integer of more than {_MAX_INT_DIGITS} digits; "
                    "return str(n) or its bytes instead"
                )
            return {"type": "integer", "value": int(value)}
        if isinstance(value, float):
            if not _isfinite(value):
                raise SerializationError(f"{where}: cannot return the non-finite number {value}")
            return {"type": "number", "value": float(value)}
        if isinstance(value, str):
            return {"type": "string", "value": str(value)}
        if isinstance(value, (bytes, bytearray, memoryview)):
            view = memoryview(value)
            data = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
            return self.binary({"type": "bytes"}, data, where)
        if isinstance(value, (list, tuple, dict)):
            return self._container(value, where, depth)
        tensor = _export_tensor(value)
        if tensor is not None:
            dtype, shape, data = tensor
            return self.binary({"type": "tensor", "dtype": dtype, "shape": shape}, data, where)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, numpy.generic):
            raise SerializationError(
                f"{where}: cannot return the numpy scalar {type(value).__module__}."
                f"{type(value).__qualname__}; convert it first (.item(), int(), float())"
            )
        raise SerializationError(
            f"{where}: cannot return a value of type {type(value).__module__}."
            f"{type(value).__qualname__}"
        )

    def _container(self, value, where: str, depth: int) -> dict:
        if id(value) in self._active:
            raise SerializationError(f"{where}: the value contains itself")
        self._active.add(id(value))
        try:
            if isinstance(value, dict):
                # The dict's own items, whatever a subclass's items() or keys say, and each
                # key as the plain string it holds: two keys never read alike.
                encoded = {}
                for key, child in list(dict.items(value)):
                    if not isinstance(key, str):
                        raise SerializationError(
                            f"{where}: returned dicts need string keys, not {type(key).__name__}"
                        )
                    name = str.__str__(key)
                    if name in encoded:
                        raise SerializationError(f"{where}: two of its keys read {name!r}")
                    encoded[name] = self.encode(child, f"{where}[{name!r}]", depth + 1)
                return {"type": "object", "value": encoded}
            return {"type": "array", "value": [
                self.encode(child, f"{where}[{index}]", depth + 1)
                for index, child in enumerate(value)]}
        finally:
            self._active.discard(id(value))


def encode_value(value, key: str, first_part: int, budget_bytes: int):
    """Encode a returned value: its binary parts in depth-first order, and a function that
    takes their SHA-256 digests and gives the JSON text of its tree. The caller computes the
    digests as it stores the parts, each pass beside the other (BlobBuilder.append_hashed)."""
    encoder = _Encoder(first_part, budget_bytes)
    tree = encoder.encode(value, f"return {key!r}")

    def text(digests: list) -> bytes:
        encoder.digested(digests)
        return _ENCODE_JSON(tree).encode("utf-8", "replace")

    return encoder.parts, text


# kcoral's own version is the server's (kcoral::version(), cmake/version.cmake), not read here.
_DISTRIBUTIONS = {
    "torch": "torch", "triton": "triton", "tvm": "apache-tvm", "tvm_ffi": "apache-tvm-ffi",
    "cutlass": "nvidia-cutlass-dsl", "numpy": "numpy",
}


def preload(name: str, gpu: bool) -> tuple[str, str]:
    """Imports `name` for a worker parent: ("imported", ""), ("not installed", "") when
    neither it nor a package above it is installed, ("failed", the exception) when its
    import raised, or ("unsafe", why) when it left a Python thread running, which a forked
    child would not have (threads that native libraries start at load, as OpenBLAS does,
    are theirs to stop around a fork). `gpu`: whether the workers will have a GPU, which
    is what torch.cuda.is_available() answers meanwhile (_cuda_answered_by_the_server)."""
    try:
        with _cuda_answered_by_the_server(gpu):
            importlib.import_module(name)
            _WARM_UPS.get(name, lambda: None)()
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(error.name + ".")):
            return "not installed", ""
        return "failed", f"{type(error).__name__}: {error}"
    except BaseException as error:  # noqa: BLE001 - any failure leaves the module out
        return "failed", f"{type(error).__name__}: {error}"
    if len(sys._current_frames()) > 1:
        return "unsafe", "started a Python thread"
    return "imported", ""


def _triton_key() -> None:
    """Triton's cache key of itself (a hash of its sources and its library: 0.84 s on the
    H200's machine), which each process computes on its first compile, a cache hit
    included; computed in the worker parent, every worker finds it done."""
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):  # 3.3 on, and before
        try:
            key = getattr(importlib.import_module(where), "triton_key", None)
        except ImportError:
            continue
        if key is not None:
            key()
            return


def _triton_first_launch() -> None:
    """What Triton's first launch in a process does before it reaches the GPU, a cache hit
    included (0.2 s of a 0.2 s cache hit on the H200's machine, Triton 3.6): its argument
    specializer imports Gluon's Hopper module (0.17 s) to recognize tensor descriptors, and
    its driver asks `file` for the platform and `ldconfig` for libcuda's folder, each kept
    for the process. Each is skipped where this Triton lacks it or the machine has no
    libcuda; the worker then does it itself, as it would have."""
    steps = (
        lambda: importlib.import_module("triton.experimental.gluon.nvidia.hopper"),
        lambda: importlib.import_module("triton.runtime.build").platform_key(),
        lambda: importlib.import_module("triton.backends.nvidia.driver").libcuda_dirs(),
    )
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - a warm-up that fails is the worker's to redo
            continue


def _warm_up_triton() -> None:
    _triton_key()
    _triton_first_launch()


# After a module is preloaded: what it computes once per process, without CUDA, on first
# use, done once in the worker parent instead of in every worker.
_WARM_UPS = {"triton": _warm_up_triton}


@contextlib.contextmanager
def _cuda_answered_by_the_server(gpu: bool) -> Iterator[None]:
    """While a module is preloaded, torch.cuda.is_available() says whether the workers
    will have a GPU, without asking the driver. A worker parent must not initialize CUDA
    (no child it forks could use it), yet some libraries ask at import whether CUDA is
    there: TVM FFI does, to load (and first build, into its cache) its DLPack addon for
    torch; so it can be preloaded, and its workers find the addon loaded. The answer is
    the one each worker would get itself."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        yield
        return
    asked = cuda.is_available
    cuda.is_available = lambda: gpu and torch.version.cuda is not None
    try:
        yield
    finally:
        cuda.is_available = asked


def reuse_state(with_names: bool) -> tuple[int, int, list[str] | None, int]:
    """What a program may leave in this interpreter for the next one in the same worker:
    the keys of sys.modules as a fingerprint (the hash of their set) and a count, with
    their names sorted when asked (to say what changed: sorting thousands of names costs
    most of a millisecond, the fingerprint a tenth of one), and the bytes of GPU memory
    torch's allocator has given out (live tensors).

    Garbage is collected first: what a program's reference cycles hold (an upload's
    memory map and its descriptor, a tensor) is not state it left, only state not yet
    freed. Cheap: the worker parent froze everything it made (gc.freeze).
    """
    gc.collect()
    keys = frozenset(list(sys.modules))
    names = sorted(name for name in keys if isinstance(name, str)) if with_names else None
    return hash(keys), len(keys), names, _torch_gpu_bytes()


def _torch_gpu_bytes() -> int:
    """The bytes torch's allocator has given out on the current device: its one counter,
    read from the allocator's statistics as torch keeps them. torch.cuda.memory_allocated()
    reads the same counter after flattening every statistic into a sorted dictionary; it is
    the fallback."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    try:
        stats = torch._C._cuda_memoryStats(torch.cuda.current_device())
        return int(stats["allocated_bytes"]["all"]["current"])
    except (AttributeError, KeyError, TypeError):
        return int(torch.cuda.memory_allocated())


def versions() -> dict[str, str]:
    """What is installed in this environment, read without importing any of it (the CUDA
    version comes from torch, when the worker has imported it). Reading it imports
    importlib.metadata (with zipfile, email and threading): a worker parent asks in a child
    of its own, so as not to hold them."""
    import importlib.metadata

    found = {"python": platform.python_version()}
    for name, distribution in _DISTRIBUTIONS.items():
        try:
            found[name] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    torch = sys.modules.get("torch")  # a GPU worker parent has imported it already
    if torch is not None and getattr(torch.version, "cuda", None):
        found["cuda"] = str(torch.version.cuda)
    return found
