// kcoral._native: the module through which Python reaches libkcoral.
//
// `execute(content_type, body)` takes the same multipart request a server takes and
// answers with the same response, through the same codec, so the client decodes a local
// run exactly as a remote one (kcoral.run_local). It runs in the calling interpreter: no
// isolation from the caller's state and no timeout; the server is the place for
// untrusted or hanging code. GPU builds add `benchmark`.
//
// The module has two homes: the extension kcoral/_native*.so in a Python environment, and
// a built-in module of every process that starts Python through libkcoral (the server's
// workers), registered before the interpreter starts. So a worker has one copy of
// libkcoral, and of the CUPTI state inside it, not two.
#include "python/native_module.hpp"

#include <chrono>
#include <memory>

#include "kcoral/codec.hpp"
#include "kcoral/executor.hpp"
#include "kcoral/request_id.hpp"

namespace {

kcoral::EncodedResponse execute_request(std::string_view content_type, std::string_view body) {
  std::string request_id = kcoral::new_request_id();
  auto request = kcoral::parse_execute_request(content_type, body, {});
  if (!request) return kcoral::encode_error(request_id, request.error());
  std::vector<std::string> missing;
  for (const std::string& digest : request->program.blobs()) {
    if (!request->blobs.contains(digest)) missing.push_back(digest);
  }
  if (!missing.empty()) return kcoral::encode_cache_miss(request_id, missing);

  // One executor for the life of the interpreter; deliberately never destroyed, since
  // the interpreter it points into is torn down before static destructors run.
  static kcoral::Executor* executor = nullptr;
  if (executor == nullptr) {
    auto created = kcoral::Executor::create({});
    if (!created) return kcoral::encode_error(request_id, created.error());
    executor = created->release();
  }
  kcoral::RunOptions options;
  if (auto limit = request->program.options().output_limit_bytes) options.output_limit_bytes = *limit;
  kcoral::NoGpuLease lease;
  kcoral::ProgramResult result = executor->run(request->program, request->blobs, lease, options);
  return kcoral::encode_program_response(request_id, result, {0, result.elapsed_ms, 0, 0});
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
  return Py_BuildValue("(is#y#)", response.http_status, response.content_type.data(),
                       static_cast<Py_ssize_t>(response.content_type.size()), response.body.data(),
                       static_cast<Py_ssize_t>(response.body.size()));
}

PyMethodDef kMethods[] = {
    {"execute", execute, METH_VARARGS,
     "execute(content_type: str, body: bytes) -> tuple[int, str, bytes]\n\n"
     "Run one multipart /execute request in this process; return the HTTP status, the "
     "response content type and body."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "kcoral._native",
                       "The in-process KCoral executor (see kcoral.run_local).", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

namespace kcoral::python {

PyObject* create_native_module() { return PyModule_Create(&kModule); }

}  // namespace kcoral::python
