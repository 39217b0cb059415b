// The life of a worker process: prepare, ready, then blobs, run, clean up, result.
#include "program_process.hpp"

#include <sys/stat.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#ifdef KCORAL_HAVE_CUDA
#include "kcoral/benchmark.hpp"
#endif
#include "process_tree.hpp"
#include "remote_lease.hpp"
#include "reuse_baseline.hpp"

namespace kcoral {
namespace {

// Makes the CUDA context, a bounded number of workers at a time per GPU (the front's
// init lease), so contexts are not all made at once when many workers start together.
Status prepare_gpu(Executor& executor, Courier& courier) {
  RemoteLease init_lease(courier, RemoteLease::Kind::init);
  if (auto status = init_lease.acquire(); !status) return status;
  return executor.prepare_device();
}

struct Job {
  messages::RunProgram run;
  std::optional<Blob> program;  // its JSON, mapped from the memfd that came with `run`
  BlobMap blobs;
};

// Receives the next program (blobs first); nullopt when the front let this worker go.
std::optional<Job> next_job(Courier& courier) {
  Job job;
  while (true) {
    auto received = courier.receive();
    if (!received) return std::nullopt;
    if (auto* blobs = std::get_if<messages::Blobs>(&received->message)) {
      std::vector<std::optional<Blob>> files;  // each memfd mapped once
      for (UniqueFd& fd : received->fds) {
        auto file = Blob::from_fd(std::move(fd));
        files.push_back(file ? std::optional<Blob>(std::move(*file)) : std::nullopt);
      }
      // A blob the front described wrongly stays absent: the program then fails on it.
      for (std::size_t i = 0; i < blobs->digests.size(); ++i) {
        if (i >= blobs->files.size() || i >= blobs->offsets.size() || i >= blobs->sizes.size()) break;
        if (blobs->files[i] >= files.size() || !files[blobs->files[i]]) continue;
        if (auto blob = files[blobs->files[i]]->slice(blobs->offsets[i], blobs->sizes[i]))
          job.blobs.emplace(blobs->digests[i], std::move(*blob));
      }
    } else if (auto* run = std::get_if<messages::RunProgram>(&received->message)) {
      job.run = std::move(*run);
      if (auto text = Blob::from_fd(std::move(received->fds[0]))) job.program = std::move(*text);
      return job;
    } else {
      return std::nullopt;  // nothing else is sent to an idle worker
    }
  }
}

ProgramResult run_one(Executor& executor, Courier& courier, const Job& job, const ProgramProcessOptions& options) {
  auto program = job.program ? Program::parse(job.program->view())
                             : Result<Program>(fail(ErrorKind::engine, "its text did not come in a memory file"));
  if (!program) {
    ProgramResult result;
    result.error = InstructionError{ErrorKind::engine,
                                    "the worker could not read the program: " + program.error().message,
                                    0, "upload", std::nullopt, "", std::nullopt};
    return result;
  }
  RunOptions run_options;
  run_options.output_limit_bytes = job.run.output_limit_bytes;
  run_options.max_returned_bytes = job.run.max_returned_bytes;
  run_options.work_root = options.work_root;
  run_options.on_instruction = [&courier](std::size_t index) { (void)courier.send(messages::Progress{index}); };
  run_options.on_gpu_access = [&courier](const GpuAccessDetail&) { (void)courier.send(messages::GpuAccess{}); };
  if (!options.gpu) {
    NoGpuLease lease;
    return executor.run(*program, job.blobs, lease, run_options);
  }
  RemoteLease lease(courier, RemoteLease::Kind::program);
  return executor.run(*program, job.blobs, lease, run_options);
}

// The parts behind one sealed memfd that holds exactly them, back to back (as the
// executor makes them); other parts are copied into a new one.
Result<Blob> parts_file(const std::vector<Blob>& parts) {
  std::size_t offset = 0;
  bool one_file = true;
  for (const Blob& part : parts) {
    one_file = one_file && part.fd() == parts.front().fd() && part.offset() == offset;
    offset += part.size();
  }
  struct stat info {};
  if (one_file && ::fstat(parts.front().fd(), &info) == 0 && static_cast<std::size_t>(info.st_size) == offset)
    return parts.front();
  BlobBuilder builder;
  for (const Blob& part : parts)
    KCORAL_TRY(builder.append(part.bytes()));
  auto packed = builder.finish();
  if (!packed) return std::unexpected(packed.error());
  return packed->front();
}

// The threads benchmark() had CUPTI start, which the reuse check leaves out (kcoral/benchmark.hpp).
std::vector<int> benchmark_threads() {
#ifdef KCORAL_HAVE_CUDA
  return gpu::benchmark_threads();
#else
  return {};
#endif
}

// How long threads more than the baseline's may take to end before they retire the worker
// (ReuseBaseline::departure_now): a joined thread's exit takes microseconds.
constexpr std::chrono::milliseconds kThreadsSettle{20};

// Why a worker that may run more programs takes no other after this one; nullopt: it does.
std::optional<std::string> retirement(const ProgramResult& result, bool left_processes,
                                      const std::optional<ReuseBaseline>& baseline, Executor& executor) {
  if (result.device_lost) return "CUDA context: lost to a sticky error";
  if (left_processes) return "processes: the program left some running";
  if (!baseline) return std::nullopt;
  std::set<int> answer;  // the returned values' memory files, held until the result is sent
  for (const Blob& part : result.parts) answer.insert(part.fd());
  return baseline->departure_now(executor, answer, kThreadsSettle, benchmark_threads());
}

// Whether the program's benchmark() refused a call for its streams (kcoral/benchmark.hpp).
bool refused_multi_stream() {
#ifdef KCORAL_HAVE_CUDA
  return gpu::take_multi_stream_refusal();
#else
  return false;
#endif
}

// The sizes of a result's parts, and which are blobs of its program (RunResult::part_blobs).
struct PartsSent {
  std::vector<std::uint64_t> sizes;
  std::vector<std::string> blobs;
};

// Takes out of `result` the parts that are blobs of the job (a bytes upload returned as it
// came: BlobBuilder::append_shared): the front sends its own copy of each, named by its
// digest. `result.parts` keeps the others, in order, for the parts file.
PartsSent take_job_blobs(ProgramResult& result, const BlobMap& job_blobs) {
  PartsSent sent;
  if (result.parts.empty()) return sent;
  std::map<std::tuple<int, std::size_t, std::size_t>, const std::string*> where;
  for (const auto& [digest, blob] : job_blobs) where.emplace(std::tuple{blob.fd(), blob.offset(), blob.size()}, &digest);
  std::vector<Blob> written;
  bool any = false;
  for (Blob& part : result.parts) {
    sent.sizes.push_back(part.size());
    auto blob = where.find({part.fd(), part.offset(), part.size()});
    any = any || blob != where.end();
    sent.blobs.push_back(blob != where.end() ? *blob->second : "");
    if (blob == where.end()) written.push_back(std::move(part));
  }
  result.parts = std::move(written);
  if (!any) sent.blobs.clear();
  return sent;
}

Status send_result(Courier& courier, const ProgramResult& result, PartsSent parts, bool continues,
                   std::string retired, bool multi_stream) {
  messages::RunResult message{continues,
                       result.results_json,
                       result.stdout_output.text,
                       result.stdout_output.truncated,
                       result.stderr_output.text,
                       result.stderr_output.truncated,
                       result.elapsed_ms,
                       {},
                       std::nullopt,
                       std::move(retired),
                       multi_stream};
  if (const auto& error = result.error) {
    message.error = messages::ErrorDetail{error->kind, error->message, error->instruction_index,
                                      error->instruction_op, error->traceback, error->instruction_id,
                                      std::nullopt, std::nullopt};
    if (error->gpu_access) {
      message.error->cuda_call = error->gpu_access->cuda_call;
      message.error->location = error->gpu_access->location;
    }
  }
  message.part_sizes = std::move(parts.sizes);
  message.part_blobs = std::move(parts.blobs);
  if (result.parts.empty()) return courier.send(message);
  auto file = parts_file(result.parts);
  if (!file) return std::unexpected(file.error());
  return courier.send(message, {file->fd()});
}

}  // namespace

int serve_programs(Executor& executor, Courier& courier, const ProgramProcessOptions& options) {
  // Before the first program arrives, not after: this worker was forked ahead of time.
  if (options.warm_up) executor.warm_up(options.work_root);
  if (options.gpu) {
#ifdef KCORAL_HAVE_CUDA
    gpu::refuse_multi_stream_calls(options.refuse_multi_stream);
#endif
    if (auto status = prepare_gpu(executor, courier); !status) {
      (void)courier.send(messages::Failed{status.error().message});
      return 1;
    }
  }
  std::optional<ReuseBaseline> baseline;
  if (options.programs > 1) {
    // What the worker made ready (CUDA's and the frameworks' objects) stays for its life:
    // frozen, the collection each check makes between programs, and Python's own, skip it.
    executor.freeze_objects();
    if (options.check_reuse) baseline = ReuseBaseline::capture(executor);
  }
  for (std::size_t served = 0; served < options.programs; ++served) {
    if (!courier.send(messages::Ready{})) return 1;
    std::optional<Job> job = next_job(courier);
    if (!job) return 0;
    ProgramResult result = run_one(executor, courier, *job, options);
    PartsSent parts = take_job_blobs(result, job->blobs);
    bool multi_stream = refused_multi_stream();
    job.reset();  // its blobs' memory files closed, as before it came
    // The response is the program's end: nothing it started may outlive it.
    bool left_processes = kill_descendants() > 0;
    std::optional<std::string> retired;
    if (served + 1 < options.programs) retired = retirement(result, left_processes, baseline, executor);
    bool continues = served + 1 < options.programs && !retired;
    if (!send_result(courier, result, std::move(parts), continues, retired.value_or(""), multi_stream)) return 1;
    if (!continues) return result.device_lost ? 2 : 0;
  }
  return 0;
}

}  // namespace kcoral
