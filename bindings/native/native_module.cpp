// kcoral._native: the module through which Python reaches libkcoral.
//
// `execute(content_type, body)` takes the same multipart request a server takes and
// answers with the same response, through the same codec, so the client decodes a local
// run exactly as a remote one (kcoral.run_local). It runs in the calling interpreter: no
// isolation from the caller's state and no timeout; the server is the place for
// untrusted or hanging code. GPU builds add `benchmark`.
//
// Its two homes: kcoral/native_module.hpp.
#include "kcoral/native_module.hpp"

#include "py_ref.hpp"  // <Python.h> first, as CPython asks

#include <algorithm>
#include <chrono>
#include <memory>

#include "kcoral/codec.hpp"
#include "kcoral/execute.hpp"
#include "kcoral/executor.hpp"
#include "kcoral/program.hpp"
#include "kcoral/request_id.hpp"
#ifdef KCORAL_HAVE_CUDA
#include "kcoral/benchmark.hpp"
#endif

namespace {

// The server's pipeline (kcoral/execute.hpp) with its default settings, one tenant (the
// caller), and no cache: a store that keeps nothing, so every blob must come with the request.
kcoral::EncodedResponse execute_request(std::string_view content_type, std::string_view body) {
  std::string request_id = kcoral::new_request_id();
  const kcoral::ExecuteSettings settings;
  kcoral::BlobStore no_cache(0);
  kcoral::ReceivedBody received;  // a server receives a body into one; here it is copied there
  if (!received.bytes.append(body))
    return kcoral::encode_error(request_id, {kcoral::ErrorKind::busy, "no memory for the request's " +
                                                                          std::to_string(body.size()) + " bytes"});
  auto admitted = kcoral::admit_execute(request_id, content_type, received, no_cache, "local", settings);
  if (auto* answer = std::get_if<kcoral::ExecuteAnswer>(&admitted)) return answer->response;
  auto& request = std::get<kcoral::AdmittedRequest>(admitted);

  // One executor for the life of the interpreter; deliberately never destroyed, since
  // the interpreter it points into is torn down before static destructors run.
  static kcoral::Executor* executor = nullptr;
  if (executor == nullptr) {
    auto created = kcoral::Executor::create({});
    if (!created) return kcoral::encode_error(request_id, created.error());
    executor = created->release();
  }
  kcoral::RunOptions options;
  options.output_limit_bytes = request.output_limit_bytes;
  options.max_returned_bytes = request.max_returned_bytes;
  kcoral::NoGpuLease lease;
  kcoral::ProgramResult result = executor->run(request.program, request.blobs, lease, options);
  kcoral::ResponseTimings timings{0, result.elapsed_ms, 0, 0};
  return kcoral::answer_execute(request_id, std::move(result), timings, settings).response;
}

PyObject* execute(PyObject*, PyObject* args) {
  const char* content_type = nullptr;
  Py_ssize_t content_type_size = 0;
  Py_buffer body;
  if (!PyArg_ParseTuple(args, "s#y*:execute", &content_type, &content_type_size, &body)) return nullptr;
  kcoral::EncodedResponse response;
  try {
    response = execute_request({content_type, static_cast<std::size_t>(content_type_size)},
                               {static_cast<const char*>(body.buf), static_cast<std::size_t>(body.len)});
  } catch (const std::exception& e) {
    PyBuffer_Release(&body);
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  PyBuffer_Release(&body);
  // The body's pieces copied once, into the bytes object itself.
  kcoral::cpython::PyRef bytes = kcoral::cpython::PyRef::steal(
      PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(response.body.size())));
  if (!bytes) return nullptr;
  char* at = PyBytes_AS_STRING(bytes.get());
  for (const kcoral::ResponseBody::Piece& piece : response.body.pieces()) {
    std::string_view data = kcoral::ResponseBody::bytes_of(piece);
    at = std::copy(data.begin(), data.end(), at);
  }
  return Py_BuildValue("(is#O)", response.http_status, response.content_type.data(),
                       static_cast<Py_ssize_t>(response.content_type.size()), bytes.get());
}

#ifdef KCORAL_HAVE_CUDA
// Raises RuntimeError carrying the error's kind (kcoral_error_kind), as the executor reads it.
PyObject* raise_error(const kcoral::Error& error) {
  kcoral::cpython::PyRef exception =
      kcoral::cpython::PyRef::steal(PyObject_CallFunction(PyExc_RuntimeError, "s", error.message.c_str()));
  if (!exception) return nullptr;
  std::string kind(kcoral::to_wire(error.kind));
  kcoral::cpython::PyRef name = kcoral::cpython::PyRef::steal(PyUnicode_FromString(kind.c_str()));
  if (!name || PyObject_SetAttrString(exception.get(), "kcoral_error_kind", name.get()) != 0) return nullptr;
  PyErr_SetObject(PyExc_RuntimeError, exception.get());
  return nullptr;
}

bool read_config(PyObject* config, kcoral::gpu::BenchmarkConfig& out) {
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t position = 0;
  while (PyDict_Next(config, &position, &key, &value)) {
    const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : nullptr;
    std::string option = name != nullptr ? name : "";
    bool is_number = PyNumber_Check(value) && !PyBool_Check(value);
    if ((option == "warmup_ms" || option == "repeat_ms") && is_number) {
      double ms = PyFloat_AsDouble(value);
      if (!(ms >= 0)) break;
      (option == "warmup_ms" ? out.warmup_ms : out.repeat_ms) = ms;
    } else if ((option == "warmup" || option == "repeat") && PyLong_Check(value) && !PyBool_Check(value)) {
      long long count = PyLong_AsLongLong(value);
      if (count < 0 || (option == "repeat" && count == 0)) break;
      (option == "warmup" ? out.warmup : out.repeat) = count;
    } else if (option == "flush_l2" && PyBool_Check(value)) {
      out.flush_l2 = value == Py_True;
    } else {
      PyErr_Format(PyExc_ValueError,
                   "benchmark: option %R=%R is not one of warmup_ms/repeat_ms (numbers >= 0), "
                   "warmup/repeat (integers; repeat >= 1), flush_l2 (bool)", key, value);
      return false;
    }
  }
  if (PyErr_Occurred()) return false;
  if (position < PyDict_Size(config)) {
    PyErr_Format(PyExc_ValueError, "benchmark: option %R has an out-of-range value %R", key, value);
    return false;
  }
  return true;
}

PyObject* benchmark(PyObject*, PyObject* args) {
  Py_ssize_t count = PyTuple_Size(args);
  if (count < 1 || !PyCallable_Check(PyTuple_GetItem(args, 0))) {
    PyErr_SetString(PyExc_TypeError, "benchmark(fn, *args[, config]) needs a callable first");
    return nullptr;
  }
  PyObject* function = PyTuple_GetItem(args, 0);
  kcoral::gpu::BenchmarkConfig config;
  Py_ssize_t last = count;
  if (count > 1 && PyDict_Check(PyTuple_GetItem(args, count - 1))) {
    if (!read_config(PyTuple_GetItem(args, count - 1), config)) return nullptr;
    last = count - 1;
  }
  kcoral::cpython::PyRef call_args = kcoral::cpython::PyRef::steal(PyTuple_GetSlice(args, 1, last));
  if (!call_args) return nullptr;
  bool python_failed = false;
  auto call = [&]() -> kcoral::Status {
    PyObject* result = PyObject_Call(function, call_args.get(), nullptr);
    if (result == nullptr) {
      python_failed = true;  // the exception stays set for our caller
      return kcoral::fail(kcoral::ErrorKind::runtime, "the function raised");
    }
    Py_DECREF(result);
    return {};
  };
  // No C++ exception may cross into the interpreter (it would end the process): out of
  // memory while recording, say, is this call's error.
  auto report = [&]() -> kcoral::Result<kcoral::gpu::BenchmarkReport> {
    try {
      return kcoral::gpu::run_benchmark(call, config);
    } catch (const std::exception& e) {
      return kcoral::fail(kcoral::ErrorKind::runtime, std::string("benchmark: ") + e.what());
    }
  }();
  if (!report) return python_failed ? nullptr : raise_error(report.error());
  // Each object the report holds is owned here, so a failure part-way leaks none of them.
  using kcoral::cpython::PyRef;
  auto optional_clock = [](const std::optional<unsigned>& mhz) {
    return mhz ? PyRef::steal(PyLong_FromUnsignedLong(*mhz)) : PyRef::borrow(Py_None);
  };
  PyRef activities = PyRef::steal(PyList_New(0));
  if (!activities) return nullptr;
  for (const std::string& name : report->activities) {
    PyRef item = PyRef::steal(PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "replace"));
    if (!item || PyList_Append(activities.get(), item.get()) != 0) return nullptr;
  }
  PyRef clock_min = optional_clock(report->sm_clock_mhz_min);
  PyRef clock_max = optional_clock(report->sm_clock_mhz_max);
  if (!clock_min || !clock_max) return nullptr;
  PyRef built = PyRef::steal(Py_BuildValue(
      "{s:d,s:d,s:d,s:d,s:d,s:d,s:L,s:L,s:O,s:O,s:L,s:O,s:L,s:s,s:O,s:O}", "latency_ms_median",
      report->latency_ms_median, "latency_ms_mean", report->latency_ms_mean, "latency_ms_min",
      report->latency_ms_min, "latency_ms_max", report->latency_ms_max, "latency_ms_p10",
      report->latency_ms_p10, "latency_ms_p90", report->latency_ms_p90, "warmup",
      static_cast<long long>(report->warmup), "repeat", static_cast<long long>(report->repeat),
      "flush_l2", report->flush_l2 ? Py_True : Py_False, "activities_stable",
      report->activities_stable ? Py_True : Py_False, "activities_per_call",
      static_cast<long long>(report->activities_per_call), "activities", activities.get(),
      "calls_with_other_activities", static_cast<long long>(report->calls_with_other_activities),
      "calls_told_apart_by", report->calls_told_apart_by.c_str(),
      "sm_clock_mhz_min", clock_min.get(), "sm_clock_mhz_max", clock_max.get()));
  if (!built || report->per_device.empty()) return built.release();
  // Only for calls that ran on several devices: a one-GPU report keeps its keys.
  PyRef per_device = PyRef::steal(PyList_New(0));
  if (!per_device) return nullptr;
  for (const kcoral::gpu::DeviceLatency& device : report->per_device) {
    PyRef item = PyRef::steal(Py_BuildValue("{s:i,s:d,s:d,s:d,s:L}", "device", device.device, "latency_ms_median",
                                            device.latency_ms_median, "latency_ms_min", device.latency_ms_min,
                                            "latency_ms_max", device.latency_ms_max, "calls",
                                            static_cast<long long>(device.calls)));
    if (!item || PyList_Append(per_device.get(), item.get()) != 0) return nullptr;
  }
  if (PyDict_SetItemString(built.get(), "per_device", per_device.get()) != 0) return nullptr;
  return built.release();
}
#endif

// The wire's dtypes and their item sizes: the one table, which the Python client is
// checked against (test/python/unit/test_one_source.py).
PyObject* dtypes(PyObject*, PyObject*) {
  PyObject* table = PyDict_New();
  if (table == nullptr) return nullptr;
  for (kcoral::Dtype dtype : kcoral::kAllDtypes) {
    std::string name(kcoral::to_wire(dtype));
    kcoral::cpython::PyRef size = kcoral::cpython::PyRef::steal(PyLong_FromSize_t(kcoral::item_size(dtype)));
    if (!size || PyDict_SetItemString(table, name.c_str(), size.get()) != 0) {
      Py_DECREF(table);
      return nullptr;
    }
  }
  return table;
}

// The workspace path rules, as the server applies them: one path's canonical form
// (ValueError when it is refused), and the collision rule over canonical paths.
PyObject* normalize_path(PyObject*, PyObject* args) {
  const char* path = nullptr;
  Py_ssize_t size = 0;
  if (!PyArg_ParseTuple(args, "s#:normalize_path", &path, &size)) return nullptr;
  auto normalized = kcoral::normalize_workspace_path({path, static_cast<std::size_t>(size)});
  if (!normalized) {
    PyErr_SetString(PyExc_ValueError, normalized.error().message.c_str());
    return nullptr;
  }
  return PyUnicode_FromStringAndSize(normalized->data(), static_cast<Py_ssize_t>(normalized->size()));
}

PyObject* check_paths(PyObject*, PyObject* list) {
  std::vector<std::string> paths;
  kcoral::cpython::PyRef iterator = kcoral::cpython::PyRef::steal(PyObject_GetIter(list));
  if (!iterator) return nullptr;
  while (PyObject* item = PyIter_Next(iterator.get())) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(item, &size);
    Py_DECREF(item);
    if (text == nullptr) return nullptr;
    paths.emplace_back(text, static_cast<std::size_t>(size));
  }
  if (PyErr_Occurred()) return nullptr;
  if (auto status = kcoral::check_path_collisions({paths.begin(), paths.end()}); !status) {
    PyErr_SetString(PyExc_ValueError, status.error().message.c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"dtypes", dtypes, METH_NOARGS, "dtypes() -> dict[str, int]\n\nThe wire's tensor dtypes and their item sizes."},
    {"normalize_path", normalize_path, METH_VARARGS,
     "normalize_path(path: str) -> str\n\nA workspace path's canonical form; ValueError when it is refused."},
    {"check_paths", check_paths, METH_O,
     "check_paths(paths: list[str]) -> None\n\nValueError when canonical upload paths repeat or nest in a file."},
    {"execute", execute, METH_VARARGS,
     "execute(content_type: str, body: bytes) -> tuple[int, str, bytes]\n\n"
     "Run one multipart /execute request in this process; return the HTTP status, the "
     "response content type and body."},
#ifdef KCORAL_HAVE_CUDA
    {"benchmark", benchmark, METH_VARARGS,
     "benchmark(fn, *args[, config]) -> dict\n\n"
     "Time fn(*args) by its GPU activity (CUPTI): first activity to last, per call. config: "
     "warmup_ms, repeat_ms, warmup, repeat, flush_l2."},
#endif
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "kcoral._native",
                       "The in-process KCoral executor (see kcoral.run_local).", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

namespace kcoral {

PyObject* create_native_module() { return PyModule_Create(&kModule); }

Status register_native_module() {
  if (Py_IsInitialized()) return fail(ErrorKind::engine, "kcoral._native must be registered before Python starts");
  if (PyImport_AppendInittab("kcoral._native", &create_native_module) != 0)
    return fail(ErrorKind::engine, "cannot register kcoral._native with Python");
  return {};
}

}  // namespace kcoral
