// WorkerHandle: the front's side of one worker process: its channel, where it stands in
// the protocol, the job it runs, and that job's deadline.
//
// A worker runs strangers' code, so everything it sends is checked against the state it
// is in, and anything not valid there kills it:
//
//   starting --ready--> idle --run(job)--> running --result--> recycling --ready--> idle
//      |  init_lease (acquire, then give back)      |  progress, lease, gpu_access
//      '--failed--> (exits)                         '--result, no more programs--> (let go)
//
// A start has a deadline (Limits::start_timeout), paused while the worker waits for its
// context-making turn (other workers' time): a worker not ready by then is killed. Every
// way a start ends is reported once: `alive` when the interpreter is seen to run (the
// first `init_lease` on a GPU server, before the CUDA context; else `ready`), then
// `started` at `ready`, or `start_failed` with a reason when it says `failed`, breaks the
// protocol, exits (the exit notice says how, and whether it ran out of memory) or passes
// the deadline.
//
// Invalid means: an unknown or malformed message, one of another state (`ready` while a
// job runs, say), one other than a result longer than 4 KiB (a failure's, 64 KiB), a
// progress index outside the program or going back, a lease asked for twice or given back
// unheld, more messages than the program can explain, or result parts that are not one
// sealed memfd of the declared size within the job's binary limit (checked by fstat before
// mapping), or returned values that are not one JSON object naming each part once
// (returned_values.hpp). The worker's process tree is killed and its job, if any, fails
// with `engine`; nothing it sent reaches another job. Returned values nested deeper than
// the protocol carries kill the worker too, and fail its program with `serialization` at
// that return. The deadline stops while the program waits for the GPU lease (lease waiting
// is not the program's time).
//
// A frame of 128 KiB or more (kHeldAnswerBytes) can only be a running program's result:
// from a worker that runs none it is a violation, unread. Its text is held in the job's
// answer budget (ExecuteJob::answer_held, the server's in-flight bytes) before it is read,
// so that answers arriving from many workers at once cannot take the front past its
// budget; one that does not fit is answered busy (the program ran; retry), its worker
// killed. One of a megabyte or more is read from its memfd, decoded (worker_frames.hpp),
// and its values checked, on the long-step threads, not on the strand that every worker and the queue share: doing that
// for 200 MB of returned values there held every other program's start for seconds.
// The worker's next frames wait meanwhile, and so do its exit notice and a deadline that
// passes: whatever it sent before them is handled first, as when it was decoded at once.
// Used on the pool's strand only; lives as long as its pending operations.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "execute_job.hpp"
#include "lease_broker.hpp"
#include "messages.hpp"
#include "process.hpp"
#include "returned_values.hpp"

namespace kcoral {

class WorkerHandle;
using WorkerPtr = std::shared_ptr<WorkerHandle>;

class WorkerHandle : public std::enable_shared_from_this<WorkerHandle> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  using Clock = std::chrono::steady_clock;
  enum class State { starting, idle, running, recycling, gone };

  // What the handle tells its owner; each runs on the strand.
  struct Events {
    std::function<void(const WorkerPtr&)> idle;  // ready for a job
    // The job ended, with its result or an error; called once per job.
    std::function<void(const WorkerPtr&, std::shared_ptr<ExecuteJob>, JobOutcome)> finished;
    std::function<void(const WorkerPtr&)> gone;  // dead or let go; it sends nothing more
    // The job that the worker `pid` runs, if it runs one.
    std::function<std::shared_ptr<const ExecuteJob>(pid_t)> job_of;
    // The start's milestones (see above); each may be left empty.
    std::function<void(const WorkerPtr&)> alive;
    std::function<void(const WorkerPtr&)> started;  // before its first `idle`
    std::function<void(const WorkerPtr&, const std::string& why, bool timed_out)> start_failed;  // before `gone`
  };
  struct Limits {
    std::size_t max_message_bytes = std::size_t{1} << 30;  // one frame's text
    std::size_t programs = 1;                              // programs one worker may run
    // From the fork to `ready`. A CPU worker takes about 10 ms (sandbox, courier, a first
    // small program), a GPU worker a quarter of a second or more besides for its CUDA
    // context and torch's; 60 s leaves a loaded many-GPU host a wide margin and still
    // shows a hung start (a wedged driver, a stopped process) within a minute.
    std::chrono::steady_clock::duration start_timeout = std::chrono::seconds(60);
  };

  // `process`: the worker, by the pidfd its parent opened; every signal goes through it, so
  // none reaches another process once the worker parent has reaped this one. `group`: the
  // supply's group it was forked for; `gpus`: that group's GPUs, the ones it sees, whose
  // leases and context-making turns it asks for (LeaseBroker).
  // `long_steps`: where its large frames are decoded (null: on the strand), outliving it.
  WorkerHandle(Strand strand, Process process, std::size_t group, std::vector<std::size_t> gpus, UniqueFd channel,
               LeaseBroker& leases, Events events, Limits limits, boost::asio::thread_pool* long_steps = nullptr);
  WorkerHandle(const WorkerHandle&) = delete;
  WorkerHandle& operator=(const WorkerHandle&) = delete;

  // Starts reading the worker's messages.
  void start();
  // Hands an idle worker a job: its blobs and program are sent at once. False when the
  // worker could not take it (it died meanwhile): the job is untouched, the worker gone.
  [[nodiscard]] bool run(std::shared_ptr<ExecuteJob> job);
  // The zygote reaped the process: `how` it ended ("killed by signal 9"); `failure`, when
  // given, is why its program failed (its processes ran out of memory together): the
  // running job then fails `runtime` with it.
  void exited(const std::string& how, const std::optional<std::string>& failure = std::nullopt);
  // Kills the process tree and lets the handle go (a running job is not answered).
  void discard();
  // Kills the process tree; a running job is answered with `error`; the handle is let go.
  void abort(const Error& error);

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] int pidfd() const { return process_.pidfd(); }
  // The tenant whose programs alone it may run, from its first program on, or from its
  // compile cache's mount before it (its compile cache, and what a program leaves in a
  // reused worker, are that tenant's).
  [[nodiscard]] std::optional<std::size_t> tenant() const { return tenant_; }
  void bind(std::size_t tenant) { tenant_ = tenant; }
  // Programs it has finished and taken another after (a reused worker's count).
  [[nodiscard]] std::size_t programs_run() const { return programs_run_; }
  [[nodiscard]] std::size_t group() const { return group_; }
  [[nodiscard]] const std::vector<std::size_t>& gpus() const { return gpus_; }
  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] const std::shared_ptr<ExecuteJob>& job() const { return job_; }

 private:
  enum class LeaseState { none, waiting, held };

  // What a frame taken from the channel came to.
  enum class Took { one, nothing, closed, stop };
  struct Decoded {
    Result<messages::Message> message;
    std::vector<UniqueFd> fds;
    std::optional<std::expected<void, ReturnedValuesRefusal>> checked;  // a result's values
    std::uint64_t output_excess = 0;  // what a result's output's JSON takes beyond its bytes
  };
  struct ExitNotice {
    std::string how;
    std::optional<std::string> failure;
  };

  void read();
  void read_turn();
  Took take_frame();
  [[nodiscard]] std::optional<std::size_t> hold_answer(const Frame& frame);
  [[nodiscard]] bool hold_more(std::uint64_t bytes);
  [[nodiscard]] bool settle_answer(const messages::Message& message, std::uint64_t output_excess);
  void decode_elsewhere(Frame frame, std::size_t max_object);
  void decoded(Decoded decoded);
  void finish_exit();
  void handle(messages::Received received, const std::expected<void, ReturnedValuesRefusal>* checked = nullptr);
  void on_ready();
  void on_init_lease(bool acquire);
  void on_progress(std::uint64_t index);
  void on_lease(bool acquire);
  void on_gpu_access();
  void on_result(messages::RunResult result, std::vector<UniqueFd> fds,
                 const std::expected<void, ReturnedValuesRefusal>* checked);
  void on_failed(const std::string& message);
  void send_grant();
  void violation(const std::string& why);
  void channel_closed();
  void crashed(const std::string& how, const std::optional<std::string>& failure = std::nullopt);
  void start_failed(const std::string& why, bool timed_out = false);
  void arm_ready_deadline(Clock::duration remaining);
  void finish(Result<ProgramResult> result, std::string worker_retired = {}, bool multi_stream = false);
  void let_go();
  void kill_tree() const;

  void start_deadline();
  void pause_deadline();
  void resume_deadline();
  void arm_deadline(Clock::duration remaining);
  void time_out();

  Strand strand_;
  boost::asio::thread_pool* long_steps_;
  pid_t pid_;  // process_'s, kept for the lease broker and the logs
  Process process_;
  std::optional<std::size_t> tenant_;
  std::size_t group_;
  std::vector<std::size_t> gpus_;
  Channel channel_;
  boost::asio::posix::stream_descriptor readable_;
  LeaseBroker& leases_;
  Events events_;
  Limits limits_;

  State state_ = State::starting;
  bool init_turn_asked_ = false;
  bool init_turn_held_ = false;
  bool alive_ = false;  // `alive` was reported
  std::size_t programs_run_ = 0;

  std::shared_ptr<ExecuteJob> job_;
  LeaseState lease_ = LeaseState::none;
  Clock::time_point dispatched_;
  std::optional<std::uint64_t> progress_;  // the instruction running now
  std::size_t messages_left_ = 0;          // this job's message budget
  std::uint64_t held_output_ = 0;          // the output its large result's hold counted on
  std::optional<std::string> interfered_request_id_;  // whose lease a cpu_only call broke
  bool closed_ = false;                    // the channel closed
  bool decoding_ = false;                  // a frame is being decoded elsewhere
  std::optional<ExitNotice> exit_notice_;  // the zygote's, while frames before it are handled
  bool deadline_passed_ = false;           // while a frame was being decoded
  boost::asio::steady_timer grace_;        // after a crash: time for the exit notice

  boost::asio::steady_timer deadline_;
  Clock::time_point deadline_at_;
  std::optional<Clock::duration> paused_remaining_;

  boost::asio::steady_timer ready_deadline_;
  Clock::time_point ready_deadline_at_;
  Clock::duration ready_remaining_{};  // while waiting for a context-making turn
};

}  // namespace kcoral
