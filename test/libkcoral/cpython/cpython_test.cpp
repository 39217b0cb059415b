// libkcoral's CPython layer (libkcoral/src/cpython), in the interpreter this test program
// embeds: PyRef's counts; Python errors taken out as PythonError, with the embedder's
// presentation; ForkScope (a forked child runs Python, the parent goes on); the frames of
// native code called from Python; the interpreter's paths and environment; and the
// registration of built-in modules, which only precedes the interpreter's start.
#include <doctest/doctest.h>

#include "py_error.hpp"  // <Python.h> first, as CPython asks

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "fork_scope.hpp"
#include "frames.hpp"
#include "interpreter.hpp"
#include "kcoral/native_module.hpp"
#include "libkcoral/executor_support.hpp"
#include "program_run.hpp"

using kcoral::cpython::Gil;
using kcoral::cpython::PyRef;
using kcoral::cpython::PythonException;

namespace {

// Runs `source` as a module's code compiled under `filename`, with the GIL held.
PyRef run_code(const char* source, const char* filename = "<cpython test>", PyObject* globals = nullptr) {
  PyRef own_globals;
  if (globals == nullptr) {
    own_globals = PyRef::steal(PyDict_New());
    PyDict_SetItemString(own_globals.get(), "__builtins__", PyEval_GetBuiltins());
    globals = own_globals.get();
  }
  PyRef code = KCORAL_PY_CHECK(Py_CompileString(source, filename, Py_file_input));
  return KCORAL_PY_CHECK(PyEval_EvalCode(code.get(), globals, globals));
}

// The PythonError a piece of code raises.
kcoral::cpython::PythonError error_of(const char* source, const char* filename = "<cpython test>") {
  try {
    run_code(source, filename);
  } catch (const PythonException& e) {
    return e.error();
  }
  FAIL("the code raised nothing");
  return {};
}

std::vector<kcoral::cpython::Frame> probed;
PyObject* probe(PyObject*, PyObject*) {
  probed = kcoral::cpython::current_frames();
  Py_RETURN_NONE;
}
PyMethodDef kProbe = {"probe", probe, METH_NOARGS, nullptr};

// The exit status of a child forked under ForkScope that runs `child` and exits with its value.
template <class Child>
int in_forked_child(Child child) {
  pid_t pid;
  {
    kcoral::cpython::ForkScope fork;
    pid = ::fork();
    if (pid == 0) {
      fork.in_child();
      ::_exit(child());
    }
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_SUITE("cpython") {

TEST_CASE("PyRef owns one reference: borrow adds one, move hands it over, destruction drops it") {
  kcoral::test::executor();  // the interpreter runs
  Gil gil;
  PyRef owner = PyRef::steal(PyLong_FromLong(1234567891));
  Py_ssize_t alone = Py_REFCNT(owner.get());
  {
    PyRef borrowed = PyRef::borrow(owner.get());
    CHECK(Py_REFCNT(owner.get()) == alone + 1);
    PyRef moved = std::move(borrowed);
    CHECK_FALSE(borrowed);
    CHECK(moved.get() == owner.get());
    CHECK(Py_REFCNT(owner.get()) == alone + 1);
  }
  CHECK(Py_REFCNT(owner.get()) == alone);
  PyRef copy = owner.copy();
  CHECK(Py_REFCNT(owner.get()) == alone + 1);
}

TEST_CASE("a raised exception becomes a PythonError: its type, message, traceback and flags") {
  kcoral::test::executor();
  Gil gil;
  auto value_error = error_of("def f():\n    raise ValueError('no good')\nf()\n");
  CHECK(value_error.type_name == "ValueError");
  CHECK(value_error.message == "no good");
  CHECK(value_error.summary() == "ValueError: no good");
  CHECK(value_error.traceback.find("line 2, in f") != std::string::npos);
  CHECK_FALSE(value_error.is_assertion);

  auto decode_error = error_of("import json\njson.loads('{')\n");
  CHECK(decode_error.type_name == "json.decoder.JSONDecodeError");

  CHECK(error_of("assert 1 == 2\n").is_assertion);
  CHECK(error_of("raise SystemExit(3)\n").is_system_exit);
  auto declared = error_of("class Missing(LookupError):\n    kcoral_error_kind = 'unavailable'\nraise Missing()\n");
  CHECK(declared.declared_kind == "unavailable");
  CHECK(declared.summary() == "Missing");
  CHECK_FALSE(PyErr_Occurred());
}

TEST_CASE("KCORAL_PY_CHECK names the failed call and its place, and lets a -1 without an error pass") {
  kcoral::test::executor();
  Gil gil;
  try {
    (void)KCORAL_PY_CHECK(PyImport_ImportModule("kcoral_no_such_module"));
    FAIL("no exception");
  } catch (const PythonException& e) {
    CHECK(e.error().type_name == "ModuleNotFoundError");
    CHECK(std::string(e.what()).find("PyImport_ImportModule(\"kcoral_no_such_module\")") != std::string::npos);
    CHECK(std::string(e.what()).find("cpython_test.cpp:") != std::string::npos);
  }
  CHECK(KCORAL_PY_CHECK(-1) == -1);
}

TEST_CASE("the embedder's presentation: its modules' classes by their own name, its frames hidden") {
  kcoral::test::executor();  // sets the executor's presentation, put back below
  Gil gil;
  kcoral::cpython::set_error_presentation({"local_", "<hidden helper>"});
  PyRef module = PyRef::steal(PyModule_New("local_7_user"));
  PyObject* globals = PyModule_GetDict(module.get());
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyDict_SetItemString(PyImport_GetModuleDict(), "local_7_user", module.get());
  run_code("class Oops(Exception):\n    pass\ndef user():\n    raise Oops('x')\n", "user.py", globals);
  PyRef helper_globals = PyRef::steal(PyDict_New());
  PyDict_SetItemString(helper_globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyDict_SetItemString(helper_globals.get(), "user", PyDict_GetItemString(globals, "user"));
  kcoral::cpython::PythonError error;
  try {
    run_code("def call():\n    user()\ncall()\n", "<hidden helper>", helper_globals.get());
  } catch (const PythonException& e) {
    error = e.error();
  }
  PyDict_DelItemString(PyImport_GetModuleDict(), "local_7_user");
  kcoral::cpython::set_error_presentation({kcoral::kUploadedModulePrefix, "<kcoral executor>"});
  CHECK(error.type_name == "Oops");
  CHECK(error.traceback.find("<hidden helper>") == std::string::npos);
  CHECK(error.traceback.find("user.py\", line 4, in user") != std::string::npos);
}

TEST_CASE("a child forked under ForkScope runs Python; the parent goes on running it") {
  kcoral::test::executor();
  int code = in_forked_child([] {
    Gil gil;
    return PyRun_SimpleString("import os\nos._exit(7 if sum(range(5)) == 10 else 1)\n") == 0 ? 2 : 3;
  });
  CHECK(code == 7);
  Gil gil;
  PyRef answer = run_code("x = 6 * 7\n");
  CHECK(answer);
}

TEST_CASE("current_frames reads the Python stack under native code, outermost first") {
  kcoral::test::executor();
  Gil gil;
  PyRef globals = PyRef::steal(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef function = PyRef::steal(PyCFunction_New(&kProbe, nullptr));
  PyDict_SetItemString(globals.get(), "probe", function.get());
  run_code("def outer():\n    inner()\n\ndef inner():\n    probe()\n\nouter()\n", "<frames test>", globals.get());
  REQUIRE(probed.size() >= 3);
  auto innermost = probed.end() - 3;
  CHECK(innermost[0].function == "<module>");
  CHECK(innermost[0].line == 7);
  CHECK(innermost[1].function == "outer");
  CHECK(innermost[1].line == 2);
  CHECK(innermost[2].function == "inner");
  CHECK(innermost[2].line == 5);
  CHECK(innermost[2].file == "<frames test>");
}

TEST_CASE("current_frames outside any Python code is empty") {
  kcoral::test::executor();
  CHECK(kcoral::cpython::current_frames().empty());
}

TEST_CASE("the interpreter's executable and the directories it reads from") {
  kcoral::test::executor();
  std::string executable = kcoral::cpython::interpreter_executable();
  CHECK_FALSE(executable.empty());
  auto paths = kcoral::cpython::interpreter_paths();
  CHECK(std::find(paths.begin(), paths.end(), executable) != paths.end());
  Gil gil;
  PyRef sys = KCORAL_PY_CHECK(PyImport_ImportModule("sys"));
  PyRef prefix = KCORAL_PY_CHECK(PyObject_GetAttrString(sys.get(), "prefix"));
  CHECK(std::find(paths.begin(), paths.end(), std::string(PyUnicode_AsUTF8(prefix.get()))) != paths.end());
}

TEST_CASE("replace_environment leaves os.environ and the C environment holding the given variables alone") {
  kcoral::test::executor();
  ::setenv("KCORAL_TEST_GONE", "1", 1);
  int code = in_forked_child([] {
    kcoral::cpython::replace_environment({{"ONLY", "here"}, {"TEXT", "é"}});
    const char* only = std::getenv("ONLY");
    if (std::getenv("KCORAL_TEST_GONE") != nullptr || only == nullptr || std::string(only) != "here") return 1;
    Gil gil;
    return PyRun_SimpleString(
               "import os\nos._exit(0 if dict(os.environ) == {'ONLY': 'here', 'TEXT': 'é'} else 2)\n") == 0
               ? 3
               : 4;
  });
  ::unsetenv("KCORAL_TEST_GONE");
  CHECK(code == 0);
}

TEST_CASE("built-in modules are registered before the interpreter starts, not after") {
  kcoral::test::executor();
  auto late = kcoral::register_native_module();
  REQUIRE_FALSE(late);
  CHECK(late.error().message.find("before Python starts") != std::string::npos);
}

}  // TEST_SUITE
