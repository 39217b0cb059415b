// current_frames (frames.hpp).
#include "frames.hpp"

#include <algorithm>

#include "py_ref.hpp"

namespace kcoral::cpython {
namespace {

std::string utf8(PyObject* text) {
  const char* bytes = text != nullptr && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : nullptr;
  if (bytes == nullptr) PyErr_Clear();
  return bytes != nullptr ? bytes : "";
}

}  // namespace

std::vector<Frame> current_frames() {
  std::vector<Frame> frames;
  if (!Py_IsInitialized()) return frames;
  // Frameworks release the GIL around their native calls (torch's lazy CUDA init does);
  // this thread's Python frames are still there, read under the GIL.
  Gil gil;
  PyThreadState* thread = PyGILState_GetThisThreadState();
  PyRef innermost = PyRef::steal(thread != nullptr ? reinterpret_cast<PyObject*>(PyThreadState_GetFrame(thread)) : nullptr);
  for (PyFrameObject* frame = reinterpret_cast<PyFrameObject*>(innermost.get()); frame != nullptr;) {
    PyRef code = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)));
    PyRef file = PyRef::steal(PyObject_GetAttrString(code.get(), "co_filename"));
    PyRef name = PyRef::steal(PyObject_GetAttrString(code.get(), "co_name"));
    frames.push_back({utf8(file.get()), utf8(name.get()), PyFrame_GetLineNumber(frame)});
    PyRef back = PyRef::steal(reinterpret_cast<PyObject*>(PyFrame_GetBack(frame)));
    frame = reinterpret_cast<PyFrameObject*>(back.get());  // alive through the innermost frame's chain
  }
  PyErr_Clear();
  std::reverse(frames.begin(), frames.end());
  return frames;
}

}  // namespace kcoral::cpython
