// Returned values (libkcoral/src/program_run.cpp with the executor's Python helper): the
// typed value tree for None, bools, ints of any size, floats, strings, lists, tuples,
// dicts, bytes-likes and numpy arrays; binary parts numbered depth-first across the whole
// response; what cannot be returned (serialization); file and folder returns with their
// refusals (links, special files, bad paths); and the max_returned_bytes budget, whose
// overrun is the request error response_too_large.
#include "kcoral/sha256.hpp"
#include "libkcoral/executor_support.hpp"

using kcoral::ErrorKind;
using kcoral::ProgramBuilder;
using kcoral::test::call;
using kcoral::test::Json;
using kcoral::test::out_of;
using kcoral::test::run;

namespace {

// A program whose function `main` returns `expression` under "out", with `prelude` at the
// module's top level.
ProgramBuilder returning(const std::string& expression, const std::string& prelude = "") {
  return call(prelude + "\ndef main():\n    return " + expression + "\n");
}

kcoral::ErrorKind failure_kind(const ProgramBuilder& b, const kcoral::RunOptions& options = {}) {
  auto ran = run(b, options);
  REQUIRE_FALSE(ran.result.completed());
  return ran.result.error->kind;
}

}  // namespace

TEST_SUITE("program_run") {

TEST_CASE("scalars become typed nodes") {
  CHECK(out_of(returning("None")) == Json{{"type", "null"}});
  CHECK(out_of(returning("True")) == Json{{"type", "boolean"}, {"value", true}});
  CHECK(out_of(returning("False")) == Json{{"type", "boolean"}, {"value", false}});
  CHECK(out_of(returning("-7")) == Json{{"type", "integer"}, {"value", -7}});
  CHECK(out_of(returning("0.25")) == Json{{"type", "number"}, {"value", 0.25}});
  CHECK(out_of(returning("'héllo \\u2603'")) == Json{{"type", "string"}, {"value", "héllo ☃"}});
  // numpy scalars are not in the protocol's value table: convert them first.
  CHECK(failure_kind(returning("np.int64(3)", "import numpy as np")) == ErrorKind::serialization);
  CHECK(failure_kind(returning("np.bool_(True)", "import numpy as np")) == ErrorKind::serialization);
  // np.float64 is a float.
  CHECK(out_of(returning("np.float64(0.5)", "import numpy as np")) == Json{{"type", "number"}, {"value", 0.5}});
}

TEST_CASE("integers wider than 64 bits are written exactly") {
  auto ran = run(returning("2**70 + 1"));
  REQUIRE(ran.result.completed());
  CHECK(ran.result.results_json == R"({"out":{"type":"integer","value":1180591620717411303425}})");
}

TEST_CASE("lists and tuples become arrays and str-keyed dicts objects, in order") {
  CHECK(out_of(returning("[1, (2, 'x'), []]")) == Json::parse(R"({"type":"array","value":[
      {"type":"integer","value":1},
      {"type":"array","value":[{"type":"integer","value":2},{"type":"string","value":"x"}]},
      {"type":"array","value":[]}]})"));
  auto object = out_of(returning("{'z': None, 'a': {'k': 1.5}}"));
  CHECK(object == Json::parse(R"({"type":"object","value":{"z":{"type":"null"},"a":{"type":"object","value":{"k":{"type":"number","value":1.5}}}}})"));
  std::vector<std::string> keys;
  for (const auto& [key, value] : object["value"].items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"z", "a"});
}

TEST_CASE("bytes-like values become bytes parts with their SHA-256") {
  auto ran = run(returning("[b'ab', bytearray(b'cd'), memoryview(b'xefx')[1:3], memoryview(b'0123456789')[::2]]"));
  REQUIRE(ran.result.completed());
  const Json& items = ran.results["out"]["value"];
  const char* expected[] = {"ab", "cd", "ef", "02468"};
  REQUIRE(ran.result.parts.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(items[i]["type"] == "bytes");
    CHECK(items[i]["part"] == "return:" + std::to_string(i));
    CHECK(items[i]["sha256"] == kcoral::sha256_hex(expected[i]));
    CHECK(ran.result.parts[i].view() == expected[i]);
  }
}

TEST_CASE("numpy arrays become tensor parts: little-endian, C order, with dtype and shape") {
  auto ran = run(returning("[np.arange(6, dtype=np.int32).reshape(2, 3).T, np.array([1.0], dtype='>f8'), "
                           "np.zeros((0, 2), dtype=np.float16), np.array([True, False])]",
                           "import numpy as np"));
  REQUIRE_MESSAGE(ran.result.completed(), ran.result.error->message);
  const Json& items = ran.results["out"]["value"];
  CHECK(items[0]["type"] == "tensor");
  CHECK(items[0]["dtype"] == "int32");
  CHECK(items[0]["shape"] == Json::array({3, 2}));
  CHECK(items[0]["part"] == "return:0");
  const std::int32_t transposed[] = {0, 3, 1, 4, 2, 5};
  const std::string expected(reinterpret_cast<const char*>(transposed), sizeof transposed);
  CHECK(ran.result.parts[0].view() == expected);
  CHECK(items[0]["sha256"] == kcoral::sha256_hex(expected));
  CHECK(items[1]["dtype"] == "float64");
  const double one = 1.0;
  CHECK(ran.result.parts[1].view() == std::string_view(reinterpret_cast<const char*>(&one), 8));
  CHECK(items[2]["shape"] == Json::array({0, 2}));
  CHECK(ran.result.parts[2].size() == 0);
  CHECK(items[3]["dtype"] == "bool");
  CHECK(ran.result.parts[3].view() == std::string_view("\x01\x00", 2));
}

TEST_CASE("a 0-d numpy array keeps its empty shape") {
  auto ran = run(returning("np.array(2.5)", "import numpy as np"));
  REQUIRE(ran.result.completed());
  CHECK(ran.results["out"]["type"] == "tensor");
  CHECK(ran.results["out"]["dtype"] == "float64");
  CHECK(ran.results["out"]["shape"] == Json::array());
  CHECK(ran.result.parts[0].size() == 8);
}

TEST_CASE("binary parts are numbered depth-first across all returns") {
  ProgramBuilder b;
  auto module = b.upload_module("m", "def first():\n    return {'a': [b'0', {'b': b'1'}], 'c': b'2'}\n"
                                     "def second():\n    return ('no parts', [b'3', [b'4']])\n");
  b.return_value("first", b.run("first", b.get_function("f1", module, "first")));
  b.return_value("plain", b.upload_bytes("plain", "5"));
  b.return_value("second", b.run("second", b.get_function("f2", module, "second")));
  auto ran = run(b);
  REQUIRE(ran.result.completed());
  REQUIRE(ran.result.parts.size() == 6);
  const char* contents[] = {"0", "1", "2", "5", "3", "4"};
  for (std::size_t i = 0; i < 6; ++i) CHECK(ran.result.parts[i].view() == contents[i]);
  CHECK(ran.results["first"]["value"]["a"]["value"][0]["part"] == "return:0");
  CHECK(ran.results["first"]["value"]["a"]["value"][1]["value"]["b"]["part"] == "return:1");
  CHECK(ran.results["first"]["value"]["c"]["part"] == "return:2");
  CHECK(ran.results["plain"]["part"] == "return:3");
  CHECK(ran.results["second"]["value"][1]["value"][0]["part"] == "return:4");
  CHECK(ran.results["second"]["value"][1]["value"][1]["value"][0]["part"] == "return:5");
}

TEST_CASE("values the protocol cannot carry fail with serialization") {
  for (const char* expression : {"float('nan')", "float('inf')", "[1, float('-inf')]", "{1: 'int key'}", "{1, 2}",
                                 "object()", "lambda: 1", "1j", "np.array([1], dtype=np.uint16)",
                                 "np.array([1+2j])", "np.array(['s'], dtype=object)"}) {
    CAPTURE(expression);
    CHECK(failure_kind(returning(expression, "import numpy as np")) == ErrorKind::serialization);
  }
}

TEST_CASE("a value that contains itself or nests too deeply fails with serialization") {
  CHECK(failure_kind(returning("x", "x = []\nx.append(x)")) == ErrorKind::serialization);
  CHECK(failure_kind(returning("x", "x = {}\nx['self'] = [x]")) == ErrorKind::serialization);
  CHECK(failure_kind(returning("x", "x = []\nfor _ in range(300):\n    x = [x]")) == ErrorKind::serialization);
  // The same object twice, side by side, is not a cycle.
  auto ran = run(returning("[y, y]", "y = [1]"));
  CHECK(ran.result.completed());
}

TEST_CASE("returns beyond max_returned_bytes fail with response_too_large, binary data and text alike") {
  kcoral::RunOptions options;
  options.max_returned_bytes = 10000;
  ProgramBuilder b;
  b.return_value("a", b.upload_bytes("a", std::string(6000, 'a')));
  b.return_value("b", b.upload_bytes("b", std::string(3000, 'b')));  // and two nodes of text
  auto fits = run(b, options);
  CHECK(fits.result.completed());
  for (std::size_t size : {1001, 1000}) {  // past the binary budget; within it, but not with the text
    ProgramBuilder over_by = b;
    over_by.return_value("c", over_by.upload_bytes("c", std::string(size, 'c')));
    auto over = run(over_by, options);
    REQUIRE(over.result.error.has_value());
    CHECK(over.result.error->kind == ErrorKind::response_too_large);
    CHECK(over.result.error->instruction_index == 5);
    CHECK(over.result.parts.size() == 2);
  }
  CHECK(failure_kind(returning("'x' * 10000"), options) == ErrorKind::response_too_large);
  CHECK(failure_kind(returning("list(range(2000))"), options) == ErrorKind::response_too_large);
  // Files and folders count against the same budget.
  ProgramBuilder files;
  files.upload_file("d/f", std::string(10001, 'f'));
  files.return_file("f", "d/f");
  CHECK(failure_kind(files, options) == ErrorKind::response_too_large);
  ProgramBuilder folder;
  folder.upload_file("d/a", std::string(6000, 'a'));
  folder.upload_file("d/b", std::string(5000, 'b'));
  folder.return_folder("d", "d");
  CHECK(failure_kind(folder, options) == ErrorKind::response_too_large);
}

TEST_CASE("a file return snapshots the file as a part") {
  ProgramBuilder b;
  b.upload_file("in.txt", "abc");
  b.return_file("literal", "./in.txt");
  auto module = b.upload_module("m", "import pathlib\ndef make():\n    pathlib.Path('out').mkdir()\n"
                                     "    pathlib.Path('out/r.bin').write_bytes(b'\\x00\\x01')\n    return pathlib.Path('out/r.bin')\n");
  b.run("path", b.get_function("make", module, "make"));
  b.return_file("by_ref", "@path");
  auto ran = kcoral::test::run_with_path_refs(b);
  REQUIRE_MESSAGE(ran.result.completed(), ran.result.error->message);
  CHECK(ran.results["literal"] == Json{{"type", "file"}, {"size", 3}, {"part", "return:0"}, {"sha256", kcoral::sha256_hex("abc")}});
  CHECK(ran.results["by_ref"]["part"] == "return:1");
  CHECK(ran.results["by_ref"]["size"] == 2);
  CHECK(ran.result.parts[1].view() == std::string_view("\0\x01", 2));
}

TEST_CASE("a folder return lists sorted files and every directory") {
  ProgramBuilder b;
  auto module = b.upload_module("m", R"(import os
def make():
    os.makedirs('out/b/deep')
    os.makedirs('out/empty')
    open('out/z.txt', 'w').write('z')
    open('out/b/deep/x', 'w').write('xx')
    open('out/a.txt', 'w').write('a')
    return 'out'
)");
  b.run("folder", b.get_function("make", module, "make"));
  b.return_folder("folder", "@folder");
  auto ran = kcoral::test::run_with_path_refs(b);
  REQUIRE_MESSAGE(ran.result.completed(), ran.result.error->message);
  const Json& node = ran.results["folder"];
  CHECK(node["type"] == "folder");
  std::vector<std::string> files;
  for (const auto& [name, file] : node["files"].items()) files.push_back(name);
  CHECK(files == std::vector<std::string>{"a.txt", "b/deep/x", "z.txt"});
  CHECK(node["directories"] == Json::array({"b", "b/deep", "empty"}));
  CHECK(node["files"]["a.txt"]["part"] == "return:0");
  CHECK(node["files"]["b/deep/x"]["part"] == "return:1");
  CHECK(node["files"]["b/deep/x"]["size"] == 2);
  CHECK(node["files"]["z.txt"]["part"] == "return:2");
  CHECK(ran.result.parts[1].view() == "xx");
}

TEST_CASE("symbolic links and special files in returns fail with serialization") {
  const char* makers[] = {
      "os.symlink('/etc/hostname', 'target')",
      "os.mkdir('target'); os.symlink('/etc', 'target/link')",
      "os.mkfifo('target')",
      "os.mkdir('target'); os.mkfifo('target/fifo')",
      "os.mkdir('real'); open('real/f', 'w').write('x'); os.symlink('real', 'target')",
  };
  for (const char* make : makers) {
    for (bool folder : {false, true}) {
      CAPTURE(make);
      CAPTURE(folder);
      ProgramBuilder b;
      auto module = b.upload_module("m", std::string("import os\ndef make():\n    ") + make + "\n");
      b.run("made", b.get_function("make", module, "make"));
      if (folder) {
        b.return_folder("r", "target");
      } else {
        b.return_file("r", "target");
      }
      auto ran = run(b);
      REQUIRE(ran.result.error.has_value());
      CHECK(ran.result.error->kind == ErrorKind::serialization);
      CHECK(ran.result.error->instruction_op == "return");
    }
  }
}

TEST_CASE("path returns of missing, mismatched or unsafe paths fail with serialization") {
  auto kind_of = [](const std::string& make, const std::string& path_expression, bool folder) {
    ProgramBuilder b;
    auto module = b.upload_module("m", "import os\ndef make():\n    " + make + "\n    return " + path_expression + "\n");
    b.run("path", b.get_function("make", module, "make"));
    if (folder) {
      b.return_folder("r", "@path");
    } else {
      b.return_file("r", "@path");
    }
    auto ran = kcoral::test::run_with_path_refs(b);
    REQUIRE(ran.result.error.has_value());
    return ran.result.error->kind;
  };
  CHECK(kind_of("pass", "'missing'", false) == ErrorKind::serialization);
  CHECK(kind_of("pass", "'missing'", true) == ErrorKind::serialization);
  CHECK(kind_of("os.mkdir('d')", "'d'", false) == ErrorKind::serialization);
  CHECK(kind_of("open('f', 'w').close()", "'f'", true) == ErrorKind::serialization);
  CHECK(kind_of("pass", "'../outside'", false) == ErrorKind::serialization);
  CHECK(kind_of("pass", "'/etc/hostname'", false) == ErrorKind::serialization);
  CHECK(kind_of("pass", "os.getcwd()", true) == ErrorKind::serialization);
  CHECK(kind_of("pass", "42", false) == ErrorKind::serialization);
  CHECK(kind_of("pass", "b'bytes/path'", false) == ErrorKind::serialization);
}

TEST_CASE("an anonymous file upload's path can be returned, and a file id names its path") {
  ProgramBuilder b;
  b.upload_file("dir/named.txt", "named", "named");
  b.upload_file("anon.txt", "anon");
  b.return_file("named", "@named");
  b.return_file("anon", "anon.txt");
  b.return_folder("dir", "dir");
  auto ran = kcoral::test::run_with_path_refs(b);
  REQUIRE_MESSAGE(ran.result.completed(), ran.result.error->message);
  CHECK(ran.result.parts[0].view() == "named");
  CHECK(ran.result.parts[1].view() == "anon");
  CHECK(ran.results["dir"]["files"]["named.txt"]["part"] == "return:2");
}

}  // TEST_SUITE
