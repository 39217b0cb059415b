// serve_programs (kcoral-server/worker/program_process.cpp), a worker's life, run in this
// process with the real executor and a real courier while a thread plays the front on the
// other end of the channel. Checked: ready, then for a program its blobs and text taken
// in, a progress per instruction and the result with its printed output; returned bytes
// as part sizes with one memory file holding them back to back; a text that does not
// parse failing at its upload with `engine`; a blob described wrongly left out, so the
// program fails on it; a reused worker saying ready again and exiting when the front lets
// it go; one retired when its program leaves a process (which is killed) or, under the
// reuse check, changes its environment, saying why; a thread that ends just after its
// program, which does not retire the worker, and one left running, which does; a GPU worker taking its
// context-making turn before ready, and failing its start when the front goes instead.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "courier.hpp"
#include "front_stand_in.hpp"
#include "kcoral/sha256.hpp"
#include "libkcoral/executor_support.hpp"
#include "libkcoral/temp_dir.hpp"
#include "program_process.hpp"

namespace messages = kcoral::messages;
using kcoral::ProgramBuilder;
using Json = nlohmann::json;

namespace {

using Front = kcoral::test::FrontStandIn;

// What the front heard during one worker's life, and how that life ended.
struct Life {
  int exit_code = -1;
  std::vector<std::string> heard;  // the names of the messages, in order
  std::vector<std::uint64_t> progress;
  std::vector<messages::RunResult> results;
  std::vector<std::string> result_files;  // the contents of each result's memfd, if any
};

// Runs serve_programs here while `front` plays the front; the front's script ends by
// returning, which closes its end of the channel.
Life live(const kcoral::ProgramProcessOptions& options, const std::function<void(Front&, Life&)>& script) {
  auto pair = kcoral::Channel::socket_pair();
  REQUIRE(pair.has_value());
  Front front{kcoral::Channel(std::move(pair->first)), {}};
  auto courier = kcoral::Courier::start(std::move(pair->second));
  REQUIRE_MESSAGE(courier.has_value(), courier.error().message);
  Life life;
  std::thread playing([&] {
    script(front, life);
    front.channel = kcoral::Channel();
  });
  life.exit_code = kcoral::serve_programs(kcoral::test::executor(), **courier, options);
  playing.join();
  return life;
}

// Receives until a result (recording what came before it); false when none came.
bool until_result(Front& front, Life& life) {
  while (auto received = front.next()) {
    life.heard.emplace_back(messages::name_of(received->message));
    if (auto* progress = std::get_if<messages::Progress>(&received->message)) life.progress.push_back(progress->index);
    if (auto* result = std::get_if<messages::RunResult>(&received->message)) {
      std::string contents;
      if (!received->fds.empty()) {
        struct stat info {};
        ::fstat(received->fds[0].get(), &info);
        contents.resize(static_cast<std::size_t>(info.st_size));
        ssize_t read = ::pread(received->fds[0].get(), contents.data(), contents.size(), 0);
        contents.resize(read > 0 ? static_cast<std::size_t>(read) : 0);
      }
      life.result_files.push_back(std::move(contents));
      life.results.push_back(std::move(*result));
      return true;
    }
  }
  return false;
}

kcoral::BuiltProgram build(const ProgramBuilder& builder) {
  auto built = builder.build();
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  return std::move(*built);
}

// A program calling `main` of `source` and returning its value as "out".
kcoral::BuiltProgram calling(const std::string& source) { return build(kcoral::test::call(source)); }

kcoral::ProgramProcessOptions options_in(const kcoral::test::TempDir& directory, std::size_t programs = 1,
                                         bool check_reuse = true) {
  kcoral::ProgramProcessOptions options;
  options.work_root = directory.path();
  options.programs = programs;
  options.check_reuse = check_reuse;
  return options;
}

// Whether `pid` runs still (a zombie, killed and not yet reaped, does not).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string skipped, state;
  if (!(stat >> skipped >> skipped >> state)) return false;
  return state != "Z";
}

}  // namespace

TEST_SUITE("program_process") {

TEST_CASE("a worker says ready, runs its program with a progress per instruction, and sends the result") {
  kcoral::test::TempDir directory;
  auto built = calling("def main():\n    print('printed')\n    return 42\n");
  Life life = live(options_in(directory), [&](Front& front, Life& life) {
    if (!front.expect<messages::Ready>()) return;
    life.heard.emplace_back("ready");
    if (front.send_job(built)) until_result(front, life);
  });
  CHECK(life.exit_code == 0);
  REQUIRE(life.results.size() == 1);
  CHECK(life.heard.front() == "ready");
  CHECK(life.heard.back() == "result");
  CHECK(life.progress == std::vector<std::uint64_t>{0, 1, 2, 3});
  const messages::RunResult& result = life.results[0];
  CHECK_FALSE(result.error.has_value());
  CHECK_FALSE(result.continues);  // one program per worker
  CHECK(result.retired.empty());
  CHECK(result.stdout_text == "printed\n");
  Json results = Json::parse(result.results);
  CHECK(results["out"]["value"] == 42);
  CHECK(result.part_sizes.empty());
}

TEST_CASE("returned bytes come as their sizes, with one memory file holding them back to back") {
  kcoral::test::TempDir directory;
  ProgramBuilder builder;
  builder.return_value("a", builder.upload_bytes("a", "hello"));
  builder.return_value("b", builder.upload_bytes("b", "world!"));
  auto built = build(builder);
  Life life = live(options_in(directory), [&](Front& front, Life& life) {
    if (front.expect<messages::Ready>() && front.send_job(built)) until_result(front, life);
  });
  REQUIRE(life.results.size() == 1);
  CHECK_FALSE(life.results[0].error.has_value());
  auto sizes = life.results[0].part_sizes;
  std::sort(sizes.begin(), sizes.end());
  CHECK(sizes == std::vector<std::uint64_t>{5, 6});
  std::string file = life.result_files[0];
  CHECK(file.size() == 11);
  CHECK((file == "helloworld!" || file == "world!hello"));
}

TEST_CASE("a large bytes upload returned as it came is named by its digest, not sent again") {
  // That its worker stays reusable (the named blob's memory file is the front's, closed
  // with the job): test_e2e_reuse.py, on a server's warmed-up workers.
  kcoral::test::TempDir directory;
  std::string large(kcoral::BlobBuilder::kHashAlongsideBytes + 3, 'L');
  ProgramBuilder builder;
  builder.return_value("small", builder.upload_bytes("small", "hello"));
  builder.return_value("large", builder.upload_bytes("large", large));
  auto built = build(builder);
  Life life = live(options_in(directory), [&](Front& front, Life& life) {
    if (front.expect<messages::Ready>() && front.send_job(built, std::nullopt, 4 << 20)) until_result(front, life);
  });
  REQUIRE(life.results.size() == 1);
  const messages::RunResult& result = life.results[0];
  REQUIRE_MESSAGE(!result.error.has_value(), result.error->message);
  REQUIRE(result.part_sizes.size() == 2);
  Json results = Json::parse(result.results);
  std::size_t large_part = results["large"]["part"] == "return:1" ? 1 : 0;
  CHECK(result.part_sizes[large_part] == large.size());
  REQUIRE(result.part_blobs.size() == 2);
  CHECK(result.part_blobs[large_part] == kcoral::sha256_hex(large));
  CHECK(results["large"]["sha256"] == kcoral::sha256_hex(large));
  CHECK(result.part_blobs[1 - large_part].empty());
  CHECK(life.result_files[0] == "hello");  // the memory file holds the other part only
}

TEST_CASE("a program text that does not parse fails at its upload with engine") {
  kcoral::test::TempDir directory;
  auto built = calling("def main():\n    return 1\n");
  Life life = live(options_in(directory), [&](Front& front, Life& life) {
    if (front.expect<messages::Ready>() && front.send_job(built, "{\"instructions\": [")) until_result(front, life);
  });
  CHECK(life.exit_code == 0);
  REQUIRE(life.results.size() == 1);
  REQUIRE(life.results[0].error.has_value());
  const messages::ErrorDetail& error = *life.results[0].error;
  CHECK(error.kind == kcoral::ErrorKind::engine);
  CHECK(error.message.starts_with("the worker could not read the program: "));
  CHECK(error.op == "upload");
  CHECK(life.progress.empty());  // nothing of it ran
}

TEST_CASE("a blob described past the end of its file is left out, and the program fails on it") {
  kcoral::test::TempDir directory;
  ProgramBuilder builder;
  builder.return_value("a", builder.upload_bytes("a", "hello"));
  auto built = build(builder);
  Life life = live(options_in(directory), [&](Front& front, Life& life) {
    if (!front.expect<messages::Ready>()) return;
    const auto& [digest, blob] = *built.blobs.begin();
    messages::Blobs wrong{{digest}, {0}, {blob.offset() + 1000}, {blob.size()}, 1};
    auto program = kcoral::Blob::copy_of(built.program.to_json());
    if (front.send(wrong, {blob.fd()}) && front.send(messages::RunProgram{"r", 1 << 20, 1 << 20}, {program->fd()}))
      until_result(front, life);
  });
  REQUIRE(life.results.size() == 1);
  REQUIRE(life.results[0].error.has_value());
  CHECK(life.results[0].error->index == 0);
  CHECK(life.results[0].error->op == "upload");
}

TEST_CASE("a reused worker says ready after each program and exits 0 when the front lets it go") {
  kcoral::test::TempDir directory;
  auto built = calling("def main():\n    return 1\n");
  int readies = 0;
  Life life = live(options_in(directory, 3), [&](Front& front, Life& life) {
    for (int i = 0; i < 2; ++i) {
      if (!front.expect<messages::Ready>()) return;
      ++readies;
      if (!front.send_job(built) || !until_result(front, life)) return;
    }
    if (front.expect<messages::Ready>()) ++readies;
  });  // the front closes the channel with the worker idle
  CHECK(life.exit_code == 0);
  CHECK(readies == 3);
  REQUIRE(life.results.size() == 2);
  for (const auto& result : life.results) {
    CHECK_FALSE(result.error.has_value());
    CHECK(result.continues);
    CHECK(result.retired.empty());
  }
}

TEST_CASE("a reused worker whose program leaves a process running kills it and retires, saying why") {
  kcoral::test::TempDir directory;
  auto built = calling("import subprocess\ndef main():\n    return subprocess.Popen(['sleep', '600']).pid\n");
  Life life = live(options_in(directory, 2, /*check_reuse=*/false), [&](Front& front, Life& life) {
    if (front.expect<messages::Ready>() && front.send_job(built)) until_result(front, life);
  });
  CHECK(life.exit_code == 0);
  REQUIRE(life.results.size() == 1);
  const messages::RunResult& result = life.results[0];
  REQUIRE_FALSE(result.error.has_value());
  CHECK_FALSE(result.continues);
  CHECK(result.retired == "processes: the program left some running");
  auto left = Json::parse(result.results)["out"]["value"].get<pid_t>();
  CHECK_FALSE(running(left));
}

TEST_CASE("under the reuse check, a program that changes the worker's environment retires it; one that does not, not") {
  kcoral::test::TempDir directory;
  auto clean = calling("def main():\n    return 1\n");
  auto changing = calling("import os\ndef main():\n    os.environ['KCORAL_TEST_LEFT'] = '1'\n    return 1\n");
  Life life = live(options_in(directory, 3), [&](Front& front, Life& life) {
    if (!front.expect<messages::Ready>() || !front.send_job(clean) || !until_result(front, life)) return;
    if (!front.expect<messages::Ready>() || !front.send_job(changing)) return;
    until_result(front, life);
  });
  ::unsetenv("KCORAL_TEST_LEFT");
  CHECK(life.exit_code == 0);
  REQUIRE(life.results.size() == 2);
  CHECK(life.results[0].continues);
  CHECK(life.results[0].retired.empty());
  CHECK_FALSE(life.results[1].continues);
  CHECK(life.results[1].retired.starts_with("environment"));
  CHECK(life.results[1].retired.find("KCORAL_TEST_LEFT") != std::string::npos);
}

TEST_CASE("under the reuse check, a thread that ends just after its program does not retire the worker; one left running does") {
  kcoral::test::TempDir directory;
  auto ending = calling("import threading, time\ndef main():\n"
                        "    threading.Thread(target=time.sleep, args=(0.005,)).start()\n    return 1\n");
  auto left = calling("import threading, time\ndef main():\n"
                      "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n    return 1\n");
  Life life = live(options_in(directory, 3), [&](Front& front, Life& life) {
    if (!front.expect<messages::Ready>() || !front.send_job(ending) || !until_result(front, life)) return;
    if (!front.expect<messages::Ready>() || !front.send_job(left)) return;
    until_result(front, life);
  });
  CHECK(life.exit_code == 0);
  REQUIRE(life.results.size() == 2);
  CHECK(life.results[0].continues);
  CHECK(life.results[0].retired.empty());
  CHECK_FALSE(life.results[1].continues);
  CHECK(life.results[1].retired.starts_with("threads: "));
  CHECK(life.results[1].retired.find(" (new: ") != std::string::npos);
}

TEST_CASE("a GPU worker makes its device under the front's init lease, given back before it says ready") {
  kcoral::test::TempDir directory;
  kcoral::ProgramProcessOptions options = options_in(directory);
  options.gpu = true;
  Life life = live(options, [&](Front& front, Life& life) {
    auto asked = front.expect<messages::InitLease>();
    if (!asked || !asked->acquire) return;
    life.heard.emplace_back("init_lease acquire");
    if (!front.send(messages::LeaseGranted{})) return;
    auto given_back = front.expect<messages::InitLease>();
    if (!given_back || given_back->acquire) return;
    life.heard.emplace_back("init_lease release");
    if (front.expect<messages::Ready>()) life.heard.emplace_back("ready");
  });  // then the front lets it go
  CHECK(life.exit_code == 0);
  CHECK(life.heard == std::vector<std::string>{"init_lease acquire", "init_lease release", "ready"});
}

TEST_CASE("a GPU worker whose front goes away instead of granting its init lease fails its start") {
  kcoral::test::TempDir directory;
  kcoral::ProgramProcessOptions options = options_in(directory);
  options.gpu = true;
  bool asked = false;
  Life life = live(options, [&](Front& front, Life&) { asked = front.expect<messages::InitLease>().has_value(); });
  CHECK(asked);
  CHECK(life.exit_code == 1);
}

}  // TEST_SUITE
