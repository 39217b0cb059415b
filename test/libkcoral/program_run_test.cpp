// ProgramRun (libkcoral/src/program_run.cpp), failure semantics and lease placement: each
// failure kind (parse, runtime, correctness, serialization, engine) with the failing
// instruction's index/op/id and a traceback that starts in the uploaded code; earlier
// returns kept and later instructions skipped; on_instruction order; and, through a
// recording GpuLease, where the lease is taken and dropped (docs/protocol.md "Lease placement").
#include <chrono>
#include <cstring>
#include <thread>

#include "libkcoral/executor_support.hpp"

using kcoral::ErrorKind;
using kcoral::ProgramBuilder;
using kcoral::json_literal;
using kcoral::test::call;
using kcoral::test::run;

namespace {

// A lease over a pretend GPU that records each change of hands, tagged with the index of
// the instruction running at the time (as told by on_instruction).
class RecordingLease final : public kcoral::GpuLease {
 public:
  kcoral::Status acquire() override {
    if (!grant) return kcoral::fail(ErrorKind::busy, "no GPU for you");
    if (!held_) {
      std::this_thread::sleep_for(acquire_delay);
      events.push_back("acquire@" + where());
    }
    held_ = true;
    return {};
  }
  void release() override {
    if (held_) events.push_back("release@" + where());
    held_ = false;
  }
  bool held() const override { return held_; }
  bool has_gpu() const override { return true; }

  std::string where() const { return current < 0 ? "start" : std::to_string(current); }

  std::vector<std::string> events;
  int current = -1;
  bool grant = true;
  std::chrono::milliseconds acquire_delay{0};

 private:
  bool held_ = false;
};

}  // namespace

TEST_SUITE("program_run") {

TEST_CASE("a syntax error in a module fails its upload with parse and a traceback") {
  ProgramBuilder b;
  b.upload_bytes("first", "x");
  b.upload_module("broken", "def main(:\n    pass\n");
  auto ran = run(b);
  const auto& error = ran.error();
  CHECK(error.kind == ErrorKind::parse);
  CHECK(error.instruction_index == 1);
  CHECK(error.instruction_op == "upload");
  CHECK(error.instruction_id == std::optional<std::string>("broken"));
  CHECK(error.message.rfind("SyntaxError", 0) == 0);
  CHECK(error.traceback.find("broken") != std::string::npos);  // the module's file
  CHECK(error.traceback.find("<kcoral executor>") == std::string::npos);
}

TEST_CASE("an exception at a module's top level fails its upload with parse") {
  ProgramBuilder b;
  b.upload_module("m", "raise KeyError('at import')\n");
  auto ran = run(b);
  CHECK(ran.error().kind == ErrorKind::parse);
  CHECK(ran.error().message == "KeyError: 'at import'");
  CHECK(ran.error().traceback.rfind("Traceback (most recent call last):\n  File \"", 0) == 0);
  CHECK(ran.error().traceback.find("<kcoral executor>") == std::string::npos);
}

TEST_CASE("an exception's message of megabytes is cut to its first 64 KiB, saying how much was cut") {
  ProgramBuilder b;
  b.upload_module("m", "raise ValueError('\u00e9' + 'x' * (4 << 20))\n");
  auto ran = run(b);
  const std::string& message = ran.error().message;
  CHECK(message.starts_with("ValueError: \xc3\xa9xxx"));
  CHECK(message.size() < kcoral::kErrorMessageBytes + 64);
  CHECK(message.ends_with("... (" + std::to_string(std::strlen("ValueError: ") + 2 + (4 << 20) - kcoral::kErrorMessageBytes) +
                          " more bytes cut)"));
  CHECK(ran.error().traceback.size() <= kcoral::kTracebackBytes);
}

TEST_CASE("get_function of a name the module lacks fails with parse") {
  ProgramBuilder b;
  b.get_function("fn", b.upload_module("m", "x = 1\n"), "missing");
  auto ran = run(b);
  CHECK(ran.error().kind == ErrorKind::parse);
  CHECK(ran.error().instruction_index == 1);
  CHECK(ran.error().instruction_op == "get_function");
  CHECK(ran.error().instruction_id == std::optional<std::string>("fn"));
  CHECK(ran.error().message.find("missing") != std::string::npos);
}

TEST_CASE("an exception escaping a run is runtime, with type and message and a traceback in uploaded code") {
  auto ran = run(call("def helper():\n    raise ValueError('bad value')\ndef main():\n    helper()\n"));
  const auto& error = ran.error();
  CHECK(error.kind == ErrorKind::runtime);
  CHECK(error.message == "ValueError: bad value");
  CHECK(error.instruction_index == 2);
  CHECK(error.instruction_op == "run");
  CHECK(error.instruction_id == std::optional<std::string>("out"));
  // The traceback starts in the uploaded code, not in the executor.
  const std::string first_frame = error.traceback.substr(0, error.traceback.find(", line"));
  CHECK(error.traceback.rfind("Traceback (most recent call last):\n", 0) == 0);
  CHECK(first_frame.find("m.py") != std::string::npos);
  CHECK(error.traceback.find("in helper") != std::string::npos);
  CHECK(error.traceback.find("ValueError: bad value") != std::string::npos);
}

TEST_CASE("an exception whose str() fails still fails the run with runtime") {
  auto ran = run(call("class Odd(Exception):\n    def __str__(self):\n        raise TypeError('no str')\n"
                      "def main():\n    raise Odd()\n"));
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.error().message.find("Odd") != std::string::npos);
  CHECK_FALSE(ran.error().traceback.empty());
}

TEST_CASE("an exception with an empty message reports its type alone") {
  auto ran = run(call("def main():\n    raise RuntimeError()\n"));
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.error().message == "RuntimeError");
}

TEST_CASE("a failed assert is correctness, as is any AssertionError subclass") {
  auto plain = run(call("def main():\n    assert 1 == 2, 'mismatch'\n"));
  CHECK(plain.error().kind == ErrorKind::correctness);
  CHECK(plain.error().message == "AssertionError: mismatch");
  auto subclass = run(call("class Close(AssertionError):\n    pass\ndef main():\n    raise Close('not close')\n"));
  CHECK(subclass.error().kind == ErrorKind::correctness);
  CHECK(subclass.error().message.find("not close") != std::string::npos);
}

TEST_CASE("an exception may declare its program error kind") {
  auto declared = [](const std::string& kind) {
    return run(call("class Declared(Exception):\n    kcoral_error_kind = " + kind +
                    "\ndef main():\n    raise Declared('with a kind')\n"));
  };
  auto compile = declared("'compile'");
  CHECK(compile.error().kind == ErrorKind::compile);
  CHECK(compile.error().message == "Declared: with a kind");
  CHECK(declared("'correctness'").error().kind == ErrorKind::correctness);
  // Kinds that are not program kinds, or not kinds at all, are ignored.
  CHECK(declared("'busy'").error().kind == ErrorKind::runtime);
  CHECK(declared("'no-such-kind'").error().kind == ErrorKind::runtime);
  CHECK(declared("3").error().kind == ErrorKind::runtime);
}

TEST_CASE("SystemExit from uploaded code fails the run instead of ending the process") {
  auto ran = run(call("import sys\ndef main():\n    sys.exit(3)\n"));
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.error().message.find("SystemExit") != std::string::npos);
}

TEST_CASE("running a value that is not callable is runtime") {
  ProgramBuilder b;
  b.run("r", b.get_function("x", b.upload_module("m", "x = 5\n"), "x"));
  auto ran = run(b);
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.error().message.find("not callable") != std::string::npos);
  CHECK(ran.error().instruction_index == 2);
}

TEST_CASE("a missing blob fails its upload with engine") {
  ProgramBuilder b;
  b.upload_bytes("b", "data");
  auto built = b.build();
  REQUIRE(built.has_value());
  kcoral::NoGpuLease lease;
  auto result = kcoral::test::executor().run(built->program, {}, lease, {});
  REQUIRE(result.error.has_value());
  CHECK(result.error->kind == ErrorKind::engine);
  CHECK(result.error->instruction_index == 0);
}

TEST_CASE("returns made before a failure are kept; instructions after it do not run") {
  ProgramBuilder b;
  auto module = b.upload_module("m", "def ok():\n    return 'kept'\ndef bad():\n    raise OSError('disk')\n"
                                     "def later():\n    print('must not run')\n");
  b.return_value("first", b.run("first", b.get_function("ok", module, "ok")));
  b.return_value("bytes", b.upload_bytes("bytes", "part"));
  b.run("bad", b.get_function("bad_fn", module, "bad"));
  b.return_value("later", b.run("later", b.get_function("later_fn", module, "later")));
  auto ran = run(b);
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.error().instruction_index == 7);
  CHECK(ran.results.size() == 2);
  CHECK(ran.results["first"]["value"] == "kept");
  CHECK(ran.results["bytes"]["part"] == "return:0");
  CHECK(ran.result.parts.size() == 1);
  CHECK(ran.result.stdout_output.text.find("must not run") == std::string::npos);
}

TEST_CASE("a failing return is serialization with no id and adds no parts") {
  ProgramBuilder b;
  auto module = b.upload_module("m", "def main():\n    return [b'part', float('nan')]\n");
  b.return_value("ok", b.upload_bytes("b", "ok"));
  b.return_value("bad", b.run("v", b.get_function("fn", module, "main")));
  auto ran = run(b);
  const auto& error = ran.error();
  CHECK(error.kind == ErrorKind::serialization);
  CHECK(error.instruction_index == 5);
  CHECK(error.instruction_op == "return");
  CHECK_FALSE(error.instruction_id.has_value());
  CHECK(error.message.find("non-finite") != std::string::npos);
  CHECK(ran.result.parts.size() == 1);  // only the earlier return's part
  CHECK(ran.results.contains("ok"));
  CHECK_FALSE(ran.results.contains("bad"));
}

TEST_CASE("output printed before a failure is kept") {
  auto ran = run(call("def main():\n    print('progress')\n    raise ValueError('late')\n"));
  CHECK(ran.error().kind == ErrorKind::runtime);
  CHECK(ran.result.stdout_output.text == "progress\n");
}

TEST_CASE("tracebacks are cut to their last 8192 bytes") {
  auto ran = run(call("def main():\n    raise ValueError('x' * 20000 + 'END')\n"));
  CHECK(ran.error().traceback.size() == 8192);
  CHECK(ran.error().traceback.find("END") != std::string::npos);
}

TEST_CASE("on_instruction is called before each instruction, in order, and stops at a failure") {
  std::vector<std::size_t> seen;
  kcoral::RunOptions options;
  options.on_instruction = [&](std::size_t i) { seen.push_back(i); };
  auto program = call("def main():\n    return 1\n");
  auto ran = run(program, options);
  CHECK(ran.result.completed());
  CHECK(seen == std::vector<std::size_t>{0, 1, 2, 3});
  seen.clear();
  (void)run(call("def main():\n    raise ValueError()\n"), options);
  CHECK(seen == std::vector<std::size_t>{0, 1, 2});
}

TEST_CASE("a run reports the time it took") {
  auto ran = run(call("import time\ndef main():\n    time.sleep(0.05)\n"));
  CHECK(ran.result.completed());
  CHECK(ran.result.elapsed_ms >= 50);
  CHECK(ran.result.lease_wait_ms == 0);
  CHECK(ran.result.lease_held_ms == 0);
}

TEST_CASE("the lease is taken lazily and dropped around files, folders and cpu_only runs") {
  ProgramBuilder b;
  auto data = b.upload_bytes("data", "x");                                        // 0: no change
  b.upload_file("f.txt", "text");                                                // 1: (not held)
  auto module = b.upload_module("m", "def f(*a):\n    return 1\n");             // 2: acquire
  auto cpu = b.get_function("cpu", module, "f", /*cpu_only=*/true);              // 3: held
  auto gpu = b.get_function("gpu", module, "f");                                 // 4: held
  b.run("a", cpu, {data});                                                       // 5: release
  auto r = b.run("b", gpu);                                                      // 6: acquire
  b.return_value("b", r);                                                        // 7: held
  b.return_file("file", "f.txt");                                                // 8: release
  b.upload_bytes("more", "y");                                                   // 9: no change
  b.return_value("c", b.run("c", gpu));                                          // 10, 11: acquire
  RecordingLease lease;
  kcoral::RunOptions options;
  options.on_instruction = [&lease](std::size_t i) { lease.current = static_cast<int>(i); };
  auto ran = run(b, options, &lease);
  REQUIRE(ran.result.completed());
  CHECK(lease.events == std::vector<std::string>{"acquire@2", "release@5", "acquire@6", "release@8", "acquire@10",
                                                 "release@11"});
  CHECK_FALSE(lease.held());
}

TEST_CASE("after a failure the lease is taken again for clean-up and then released") {
  RecordingLease lease;
  kcoral::RunOptions options;
  options.on_instruction = [&lease](std::size_t i) { lease.current = static_cast<int>(i); };
  ProgramBuilder b;
  b.upload_file("f", "x");
  b.upload_bytes("late", "y");
  auto ran = run(b, options, &lease);  // nothing needed the GPU: clean-up still takes it
  REQUIRE(ran.result.completed());
  CHECK(lease.events == std::vector<std::string>{"acquire@1", "release@1"});

  lease.events.clear();
  auto failed = run(call("def main():\n    raise ValueError()\n"), options, &lease);
  CHECK(failed.result.error.has_value());
  CHECK(lease.events == std::vector<std::string>{"acquire@0", "release@2"});
}

TEST_CASE("a lease that cannot be taken fails the instruction that needs it with engine") {
  RecordingLease lease;
  lease.grant = false;
  ProgramBuilder b;
  b.upload_bytes("b", "x");
  b.upload_module("m", "");
  auto ran = run(b, {}, &lease);
  CHECK(ran.error().kind == ErrorKind::engine);
  CHECK(ran.error().instruction_index == 1);
  CHECK(ran.error().message.find("no GPU for you") != std::string::npos);
}

TEST_CASE("a module is written and compiled before the lease is asked for") {
  // With no lease to be had, a module that does not compile still fails as itself: the
  // compile came first. One that compiles then fails for want of the lease.
  RecordingLease lease;
  lease.grant = false;
  ProgramBuilder broken;
  broken.upload_module("m", "def f(:\n");
  auto failed = run(broken, {}, &lease);
  CHECK(failed.error().kind == ErrorKind::parse);
  CHECK(failed.error().message.rfind("SyntaxError", 0) == 0);
  ProgramBuilder fine;
  fine.upload_module("m", "x = 1\n");
  CHECK(run(fine, {}, &lease).error().kind == ErrorKind::engine);
}

TEST_CASE("time spent waiting for and holding the lease is reported") {
  RecordingLease lease;
  lease.acquire_delay = std::chrono::milliseconds(60);
  auto ran = run(call("import time\ndef main():\n    time.sleep(0.05)\n"), {}, &lease);
  REQUIRE(ran.result.completed());
  CHECK(ran.result.lease_wait_ms >= 60);
  CHECK(ran.result.lease_held_ms >= 50);
}

}  // TEST_SUITE
