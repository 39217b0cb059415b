// Executor (libkcoral/src/executor.cpp with program_run.cpp and cpu_device.cpp), running
// real programs in the embedded interpreter with NoGpuLease: each upload kind (Python and
// CUDA modules, bytes, numpy tensors over a private mapping, files, libraries that are
// unavailable on the CPU), stdout/stderr captured at the descriptor level, output limits,
// the fresh working directory of each run, and the environment's versions.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "libkcoral/executor_support.hpp"
#include "libkcoral/temp_dir.hpp"

using kcoral::ProgramBuilder;
using kcoral::json_literal;
using kcoral::test::call;
using kcoral::test::Json;
using kcoral::test::out_of;
using kcoral::test::run;

TEST_SUITE("executor") {

TEST_CASE("a Python function runs with literal arguments and its value is returned") {
  auto out = out_of(call("def main(a, b, c):\n    return a * b + len(c['k'])\n", "main",
                         {json_literal("6"), json_literal("7"), json_literal(R"({"k": [1, 2]})")}));
  CHECK(out == Json{{"type", "integer"}, {"value", 44}});
}

TEST_CASE("literal arguments reach Python as the JSON they are, nested references included") {
  auto out = out_of(call("def main(*args):\n    return [repr(a) for a in args]\n", "main",
                         {json_literal("null"), json_literal("true"), json_literal("1.5"), json_literal("\"s\\u00e9\""),
                          json_literal(R"([{"$ref": "m"}])"), json_literal("-0")}));
  std::vector<std::string> reprs;
  for (const Json& node : out["value"]) reprs.push_back(node["value"]);
  CHECK(reprs == std::vector<std::string>{"None", "True", "1.5", "'sé'", "[{'$ref': 'm'}]", "0"});
}

TEST_CASE("references pass the earlier values themselves") {
  ProgramBuilder b;
  auto module = b.upload_module("m", "class Box:\n    pass\ndef make():\n    return Box()\n"
                                     "def same(x, y):\n    return x is y\n");
  auto made = b.run("made", b.get_function("make", module, "make"));
  b.return_value("out", b.run("out", b.get_function("same", module, "same"), {made, made}));
  CHECK(out_of(b)["value"] == true);
}

TEST_CASE("a module's top level runs once, in its own namespace, as a real module file") {
  ProgramBuilder b;
  auto module = b.upload_module("my-module", "import inspect\ncount = 0\ncount += 1\n"
                                             "def main():\n    return [count, __name__, inspect.getsource(main)]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main")));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == 1);
  std::string name = value[1]["value"];
  CHECK(name.find("my_module") != std::string::npos);  // sanitized id in the module name
  CHECK(value[2]["value"] == "def main():\n    return [count, __name__, inspect.getsource(main)]\n");
}

TEST_CASE("annotations in uploaded modules are left unevaluated, as under from __future__ import annotations") {
  // The reference server compiles uploads that way, so programs written for it may annotate
  // with names that do not exist yet where the annotation stands.
  ProgramBuilder b;
  auto library = b.upload_module("library", "def helper(x: Undefined) -> Undefined:\n    return x + 1\n");
  auto entry = b.upload_module(
      "entry",
      "import typing\n"
      "def main(library, x: Undefined) -> Undefined:\n"
      "    def inner(a: T.Buffer((n,), 'float32')) -> None: ...\n"
      "    n = 4\n"
      "    return [library.helper(x), main.__annotations__, inner.__annotations__,\n"
      "            typing.get_type_hints(Node.child)['return'] is Node]\n"
      "class Node:\n"
      "    def child(self) -> Node: ...\n");
  b.return_value("out", b.run("out", b.get_function("fn", entry, "main"), {library, json_literal("41")}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == 42);
  CHECK(value[1] == Json::parse(R"({"type": "object", "value": {"x": {"type": "string", "value": "Undefined"},
                                    "return": {"type": "string", "value": "Undefined"}}})"));
  CHECK(value[2]["value"]["a"]["value"] == "T.Buffer((n,), 'float32')");
  CHECK(value[3]["value"] == true);  // a forward reference resolves once its class exists
}

TEST_CASE("get_function on a CUDA module yields an object with source and name") {
  ProgramBuilder b;
  const std::string kernel = "extern \"C\" __global__ void add(float* x) { x[0] += 1; }";
  auto cuda = b.upload_module("cu", kernel, kcoral::ModuleLanguage::cuda);
  auto add = b.get_function("add", cuda, "add");
  auto module = b.upload_module("m", "def main(k):\n    return [k.source, k.name]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {add}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == kernel);
  CHECK(value[1]["value"] == "add");
}

TEST_CASE("a bytes upload is a Python bytes object") {
  ProgramBuilder b;
  auto data = b.upload_bytes("data", std::string("\0raw\xff", 5));
  auto module = b.upload_module("m", "def main(b):\n    return [type(b).__name__, len(b), b[4]]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {data}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == "bytes");
  CHECK(value[1]["value"] == 5);
  CHECK(value[2]["value"] == 255);
}

TEST_CASE("a tensor upload is a writable numpy array whose writes stay in the program") {
  ProgramBuilder b;
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const std::string data(reinterpret_cast<const char*>(values), sizeof values);
  auto tensor = b.upload_tensor("t", data, kcoral::Dtype::float32, {2, 3});
  auto module = b.upload_module("m", "def main(t):\n    t[0, 0] = 10\n"
                                     "    return [type(t).__name__, str(t.dtype), list(t.shape), t.flags.writeable, float(t.sum())]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {tensor}));
  auto built = b.build();
  REQUIRE(built.has_value());
  kcoral::NoGpuLease lease;
  auto result = kcoral::test::executor().run(built->program, built->blobs, lease, {});
  REQUIRE(result.completed());
  auto value = Json::parse(result.results_json)["out"]["value"];
  CHECK(value[0]["value"] == "ndarray");
  CHECK(value[1]["value"] == "float32");
  CHECK(value[2] == Json::parse(R"({"type":"array","value":[{"type":"integer","value":2},{"type":"integer","value":3}]})"));
  CHECK(value[3]["value"] == true);
  CHECK(value[4]["value"] == 30.0);
  // The uploaded blob is unchanged.
  CHECK(built->blobs.begin()->second.view() == data);
}

TEST_CASE("two tensor uploads of one blob are independent arrays") {
  ProgramBuilder b;
  const std::string data(8, '\0');
  auto first = b.upload_tensor("a", data, kcoral::Dtype::int32, {2});
  auto second = b.upload_tensor("b", data, kcoral::Dtype::int32, {2});
  auto module = b.upload_module("m", "def main(a, b):\n    a[0] = 7\n    return [int(a[0]), int(b[0])]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {first, second}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == 7);
  CHECK(value[1]["value"] == 0);
}

TEST_CASE("every protocol dtype makes an array of that dtype and shape") {
  for (kcoral::Dtype dtype : {kcoral::Dtype::bool_, kcoral::Dtype::uint8, kcoral::Dtype::int8, kcoral::Dtype::int16,
                              kcoral::Dtype::float16, kcoral::Dtype::int32, kcoral::Dtype::float32,
                              kcoral::Dtype::int64, kcoral::Dtype::float64, kcoral::Dtype::bfloat16,
                              kcoral::Dtype::float8_e4m3fn, kcoral::Dtype::float8_e5m2}) {
    std::string wire(kcoral::to_wire(dtype));
    CAPTURE(wire);
    ProgramBuilder b;
    auto tensor = b.upload_tensor("t", std::string(3 * kcoral::item_size(dtype), '\0'), dtype, {3, 1});
    auto module = b.upload_module("m", "def main(t):\n    return [t.dtype.name, list(t.shape), t.dtype.itemsize]\n");
    b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {tensor}));
    auto value = out_of(b)["value"];
    CHECK(value[0]["value"] == wire);
    CHECK(value[1]["value"][0]["value"] == 3);
    CHECK(value[2]["value"] == kcoral::item_size(dtype));
  }
}

TEST_CASE("an empty tensor upload has its shape") {
  ProgramBuilder b;
  auto tensor = b.upload_tensor("t", "", kcoral::Dtype::int32, {0, 4});
  auto module = b.upload_module("m", "def main(t):\n    return [list(t.shape), t.size, str(t.dtype)]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {tensor}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"][1]["value"] == 4);
  CHECK(value[1]["value"] == 0);
  CHECK(value[2]["value"] == "int32");
}

TEST_CASE("a file upload is a 0600 file under 0700 parents in the working directory") {
  ProgramBuilder b;
  auto path = b.upload_file("./data//in.txt", "file text", "in");
  b.upload_file("helper_module_for_import_test.py", "VALUE = 42\n");
  auto module = b.upload_module("m", R"(import os
def main(path):
    import helper_module_for_import_test as helper
    return [path, open(path).read(), oct(os.stat(path).st_mode & 0o777),
            oct(os.stat("data").st_mode & 0o777), os.path.isfile("data/in.txt"), helper.VALUE]
)");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main"), {path}));
  auto value = out_of(b)["value"];
  CHECK(value[0]["value"] == "data/in.txt");  // the id names the canonical path
  CHECK(value[1]["value"] == "file text");
  CHECK(value[2]["value"] == "0o600");
  CHECK(value[3]["value"] == "0o700");
  CHECK(value[4]["value"] == true);
  CHECK(value[5]["value"] == 42);  // uploaded files import like those beside a script
}

TEST_CASE("modules whose ids sanitize to one file name load side by side") {
  ProgramBuilder b;
  auto dash = b.upload_module("a-b", "def main():\n    return 'dash'\n");
  auto under = b.upload_module("a_b", "def main():\n    return 'underscore'\n");
  auto dot = b.upload_module("a.b", "def main():\n    return __file__\n");
  b.return_value("dash", b.run("r1", b.get_function("f1", dash, "main")));
  b.return_value("under", b.run("r2", b.get_function("f2", under, "main")));
  b.return_value("dot", b.run("r3", b.get_function("f3", dot, "main")));
  auto ran = run(b);
  REQUIRE(ran.result.completed());
  CHECK(ran.results["dash"]["value"] == "dash");
  CHECK(ran.results["under"]["value"] == "underscore");
  std::string file = ran.results["dot"]["value"];
  CHECK(file.find("/modules/a_b") != std::string::npos);
}

TEST_CASE("a file upload is never written through a link or over a file the program made") {
  kcoral::test::TempDir outside;
  ProgramBuilder b;
  auto module = b.upload_module("m", "import os\ndef link(target):\n    os.symlink(target, 'dir')\n"
                                     "def plain():\n    open('taken', 'w').write('program')\n");
  b.run("linked", b.get_function("link", module, "link"), {json_literal("\"" + outside.path() + "\"")});
  b.upload_file("dir/escape.txt", "x");
  auto through_link = run(b);
  CHECK(through_link.error().kind == kcoral::ErrorKind::runtime);
  CHECK(through_link.error().instruction_index == 3);
  CHECK(std::filesystem::is_empty(outside.path()));

  ProgramBuilder over;
  auto m = over.upload_module("m", "def plain():\n    open('taken', 'w').write('program')\n");
  over.run("made", over.get_function("plain", m, "plain"));
  over.upload_file("taken", "upload");
  CHECK(run(over).error().kind == kcoral::ErrorKind::runtime);
}

TEST_CASE("a library upload is unavailable on a CPU executor") {
  ProgramBuilder b;
  b.upload_bytes("b", "x");
  auto library = b.upload_library("lib", "\x7f" "ELF not really");
  b.get_function("f", library, "f");
  auto ran = run(b);
  CHECK(ran.error().kind == kcoral::ErrorKind::unavailable);
  CHECK(ran.error().instruction_index == 1);
  CHECK(ran.error().instruction_op == "upload");
  CHECK(ran.error().instruction_id == std::optional<std::string>("lib"));
}

TEST_CASE("stdout and stderr are captured at the descriptor level, subprocesses included") {
  auto ran = run(call(R"(import os, sys
print("module top level")
def main():
    print("from print")
    sys.stderr.write("from stderr\n")
    sys.stdout.flush()
    os.write(1, b"from os.write\n")
    os.system("echo from a subprocess; echo subprocess error >&2")
    print("after", end="")
    return None
)"));
  REQUIRE(ran.result.completed());
  CHECK(ran.result.stdout_output.text == "module top level\nfrom print\nfrom os.write\nfrom a subprocess\nafter");
  CHECK(ran.result.stderr_output.text == "from stderr\nsubprocess error\n");
  CHECK_FALSE(ran.result.stdout_output.truncated);
  CHECK_FALSE(ran.result.stderr_output.truncated);
}

TEST_CASE("each stream is cut at output_limit_bytes with its own truncation flag") {
  kcoral::RunOptions options;
  options.output_limit_bytes = 5;
  auto ran = run(call("import sys\ndef main():\n    print('hello world')\n    sys.stderr.write('err')\n"), options);
  REQUIRE(ran.result.completed());
  CHECK(ran.result.stdout_output.text == "hello");
  CHECK(ran.result.stdout_output.truncated);
  CHECK(ran.result.stderr_output.text == "err");
  CHECK_FALSE(ran.result.stderr_output.truncated);
}

TEST_CASE("an output limit of 0 turns capture off") {
  kcoral::RunOptions options;
  options.output_limit_bytes = 0;
  auto ran = run(call("import os\ndef main():\n    os.write(1, b'')\n    return 1\n"), options);
  REQUIRE(ran.result.completed());
  CHECK(ran.result.stdout_output.text.empty());
  CHECK_FALSE(ran.result.stdout_output.truncated);
  CHECK(ran.result.stderr_output.text.empty());
}

TEST_CASE("output that is not UTF-8 is decoded with replacement characters") {
  auto ran = run(call("import os\ndef main():\n    os.write(1, b'ok \\xff\\xfe!')\n"));
  REQUIRE(ran.result.completed());
  CHECK(ran.result.stdout_output.text == "ok \xef\xbf\xbd\xef\xbf\xbd!");
}

TEST_CASE("every run gets a fresh working directory, removed afterwards") {
  const auto cwd_before = std::filesystem::current_path();
  auto program = call("import os\ndef main():\n    open('marker', 'w').write('x')\n"
                      "    return [os.getcwd(), sorted(os.listdir('.'))]\n");
  auto first = out_of(program)["value"];
  auto second = out_of(program)["value"];
  std::string first_dir = first[0]["value"];
  std::string second_dir = second[0]["value"];
  CHECK(first_dir != second_dir);
  CHECK(second[1]["value"].size() == 1);  // only its own marker
  CHECK_FALSE(std::filesystem::exists(first_dir));
  CHECK_FALSE(std::filesystem::exists(second_dir));
  CHECK(std::filesystem::current_path() == cwd_before);
}

TEST_CASE("the working directory is made under RunOptions::work_root and the run restores cwd") {
  kcoral::test::TempDir root;
  kcoral::RunOptions options;
  options.work_root = root / "runs";
  auto program = call("import os, sys\ndef main():\n    os.chdir('/')\n    return [os.getcwd(), sys.path[0]]\n");
  const auto cwd_before = std::filesystem::current_path();
  ProgramBuilder b;
  auto module = b.upload_module("m", "import os, sys\ndef main():\n    return [os.getcwd(), sys.path[0]]\n");
  b.return_value("out", b.run("out", b.get_function("fn", module, "main")));
  auto value = out_of(b, options)["value"];
  std::string work = value[0]["value"];
  CHECK(work.rfind(root / "runs/kcoral-", 0) == 0);
  CHECK(value[1]["value"] == work);  // the working directory leads sys.path during the run
  CHECK(std::filesystem::is_empty(root / "runs"));
  (void)out_of(program, options);  // a program that changes directory
  CHECK(std::filesystem::current_path() == cwd_before);
}

TEST_CASE("a run leaves no module, sys.path entry or working directory behind") {
  auto first = out_of(call("import os\ndef main():\n    return os.getcwd()\n"))["value"];
  auto second = out_of(call("import sys\ndef main():\n    return [sys.path, sorted(m for m in sys.modules "
                            "if m.startswith('kcoral_upload_'))]\n"))["value"];
  std::string previous_dir = first;
  for (const Json& entry : second[0]["value"]) CHECK(entry["value"] != previous_dir);
  CHECK(second[1]["value"].size() == 1);  // only this run's own module
}

TEST_CASE("versions reports python and numpy of the embedded environment") {
  auto versions = kcoral::test::executor().versions();
  REQUIRE(versions.contains("python"));
  CHECK(versions.at("python").rfind("3.", 0) == 0);
  CHECK(versions.contains("numpy"));
}

TEST_CASE("run may be called from another thread: it takes the GIL itself") {
  kcoral::test::executor();
  ProgramBuilder b = call("import threading\ndef main():\n    return threading.current_thread() is threading.main_thread()\n");
  auto built = b.build();
  REQUIRE(built.has_value());
  kcoral::ProgramResult result;
  std::thread worker([&] {
    kcoral::NoGpuLease lease;
    result = kcoral::test::executor().run(built->program, built->blobs, lease, {});
  });
  worker.join();
  REQUIRE(result.completed());
  CHECK(Json::parse(result.results_json)["out"]["value"] == false);
}

TEST_CASE("preloading a module that is not installed does not stop the executor") {
  kcoral::ExecutorOptions options;
  options.preload_modules = {"json", "no_such_module_for_kcoral_tests"};
  auto created = kcoral::Executor::create(options);
  REQUIRE_MESSAGE(created.has_value(), created.error().message);
  CHECK(out_of(call("import sys\ndef main():\n    return 'json' in sys.modules\n"))["value"] == true);
}

TEST_CASE("creating a second executor in a running interpreter works") {
  auto second = kcoral::Executor::create({});
  REQUIRE(second.has_value());
  kcoral::test::executor();  // the shared one still works alongside
  ProgramBuilder b;
  b.return_value("out", b.upload_bytes("b", "x"));
  auto built = b.build();
  REQUIRE(built.has_value());
  kcoral::NoGpuLease lease;
  auto result = (*second)->run(built->program, built->blobs, lease, {});
  CHECK(result.completed());
  CHECK(result.parts.size() == 1);
}

TEST_CASE("programs import the kcoral._native this program built in, not an extension module's copy") {
  auto out = out_of(call("import kcoral._native as native\n\ndef main():\n    return hasattr(native, '__file__')\n"));
  CHECK(out == Json{{"type", "boolean"}, {"value", false}});
}

}  // TEST_SUITE
