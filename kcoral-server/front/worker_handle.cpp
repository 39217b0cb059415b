// WorkerHandle: the per-worker protocol state machine, job delivery, crash attribution
// and the pausable deadline.
#include "worker_handle.hpp"

#include "worker_frames.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <numeric>
#include <vector>


namespace kcoral {
namespace {

// Messages read in one go before other workers get the strand.
constexpr int kMessagesPerTurn = 32;
// How long a send to a worker waits for room in its channel, on the strand every worker
// shares. A worker's courier reads as fast as the front writes; one that does not (a
// program of a reused worker can patch it to stop) is given up on, and killed, within this,
// not within the channel's default 30 s.
constexpr std::chrono::milliseconds kSendWait{1000};
// How long a dead worker's exit notice may take before its job is answered without it.
constexpr auto kExitNoticeGrace = std::chrono::milliseconds(500);

double ms_between(WorkerHandle::Clock::time_point from, WorkerHandle::Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Sends a job's blobs, then its program. Blobs that share a memfd (those of one request)
// share its descriptor; a batch carries at most the descriptors one frame may.
Status send_job(const Channel& channel, const ExecuteJob& job) {
  messages::Blobs batch;
  std::vector<int> fds;
  auto flush = [&]() -> Status {
    if (batch.digests.empty()) return {};
    batch.file_count = fds.size();
    Status sent = messages::send(channel, batch, fds);
    batch = {};
    fds.clear();
    return sent;
  };
  for (const auto& [digest, blob] : job.admitted.blobs) {
    auto file = std::find(fds.begin(), fds.end(), blob.fd());
    if (file == fds.end()) {
      if (fds.size() == Channel::kMaxFds - 1)
        if (auto status = flush(); !status) return status;
      fds.push_back(blob.fd());
      file = fds.end() - 1;
    }
    batch.digests.push_back(digest);
    batch.files.push_back(static_cast<std::uint64_t>(file - fds.begin()));
    batch.offsets.push_back(blob.offset());
    batch.sizes.push_back(blob.size());
  }
  if (auto status = flush(); !status) return status;
  // The program's text as it came, in its memfd (ExecuteJob::program_text).
  int text[] = {job.program_text.get()};
  return messages::send(channel,
                        messages::RunProgram{job.request_id, job.admitted.output_limit_bytes, job.admitted.max_returned_bytes},
                        text);
}

}  // namespace

WorkerHandle::WorkerHandle(Strand strand, Process process, std::size_t group, std::vector<std::size_t> gpus,
                           UniqueFd channel, LeaseBroker& leases, Events events, Limits limits,
                           boost::asio::thread_pool* long_steps)
    : strand_(strand),
      long_steps_(long_steps),
      pid_(process.pid()),
      process_(std::move(process)),
      group_(group),
      gpus_(std::move(gpus)),
      channel_(std::move(channel), limits.max_message_bytes, kSendWait),
      readable_(strand),
      leases_(leases),
      events_(std::move(events)),
      limits_(limits),
      grace_(strand),
      deadline_(strand),
      ready_deadline_(strand) {
  ::fcntl(channel_.fd(), F_SETFL, O_NONBLOCK);
  // Out of descriptors, the channel cannot be watched: start() lets the worker go.
  if (int watched = ::fcntl(channel_.fd(), F_DUPFD_CLOEXEC, 3); watched >= 0) readable_.assign(watched);
}

void WorkerHandle::start() {
  if (!readable_.is_open()) {
    kill_tree();
    start_failed("the front could not watch a worker's channel (it is out of descriptors)");
    return let_go();
  }
  arm_ready_deadline(limits_.start_timeout);
  read();
}

void WorkerHandle::read() {
  readable_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         if (ec || self->closed_ || self->state_ == State::gone) return;
                         self->read_turn();
                       });
}

// Takes what the channel holds, a turn's worth at most, then waits for more.
void WorkerHandle::read_turn() {
  for (int i = 0; i < kMessagesPerTurn; ++i) {
    switch (take_frame()) {
      case Took::one: continue;
      case Took::nothing: return read();
      case Took::closed: return channel_closed();
      case Took::stop: return;
    }
  }
  read();
}

// Takes one frame and handles it, or hands it to the long-step threads, after which
// decoded() goes on (Took::stop, as after a violation or the handle's end).
WorkerHandle::Took WorkerHandle::take_frame() {
  auto frame = channel_.receive_unread();
  if (!frame) {
    if (channel_.peer_closed()) return Took::closed;
    violation(frame.error().message);
    return Took::stop;
  }
  if (!*frame) return Took::nothing;
  std::size_t max_object = std::numeric_limits<std::size_t>::max();
  const bool held = (*frame)->text_bytes() >= kHeldAnswerBytes;
  if (held) {
    auto object_end = hold_answer(**frame);
    if (!object_end) return Took::stop;
    max_object = *object_end;
  }
  // 200 MB of a result's values take seconds to read and check.
  if ((*frame)->text_bytes() >= kLongStepBytes && long_steps_ != nullptr) {
    decode_elsewhere(std::move(**frame), max_object);
    return Took::stop;
  }
  auto message = read_message(**frame, channel_.max_text_bytes(), max_object);
  if (!message) {
    violation(message.error().message);
    return Took::stop;
  }
  if (const auto* result = std::get_if<messages::RunResult>(&*message);
      result != nullptr && held && !settle_answer(*message, output_json_excess(*result)))
    return Took::stop;
  handle({std::move(*message), std::move((*frame)->fds)});
  return closed_ || state_ == State::gone ? Took::stop : Took::one;
}

// A frame of kHeldAnswerBytes or more can only be a running program's result (every other
// message is small): from a worker that runs none, it is a violation, never read. Else what
// it will cost the front is held in the job's answer budget before a byte of it is read, so
// that the answers that several workers send at once are held to --max-inflight-bytes like
// requests are; one that does not fit now is answered busy, its worker killed, the frame
// left unread. The size its object may have then (nullopt: refused).
std::optional<std::size_t> WorkerHandle::hold_answer(const Frame& frame) {
  const std::size_t bytes = frame.text_bytes();
  if (state_ != State::running) {
    violation("a frame of " + std::to_string(bytes) + " bytes while it runs no program");
    return std::nullopt;
  }
  // Its text, and its output's twice more: the output is copied out of the frame, then held
  // as text beside its JSON, whose string may have twice the room it fills, while the answer
  // is encoded (settle_answer adds what the JSON's escapes take). An object that does not
  // end within kObjectPeekBytes (it may be all of the text), four times the text more: what
  // a JSON parser's buffers and tree of it may take.
  const std::optional<PeekedObject> object = peek_object(frame);
  held_output_ = object ? object->output : bytes;
  const std::uint64_t hold = bytes + 2 * held_output_ + (object ? 0 : 4 * std::uint64_t{bytes});
  if (!hold_more(hold)) return std::nullopt;
  return object ? object->end : bytes;
}

// Holds `bytes` more of the running job's answer; else answers it (busy, or too large when
// it could never fit) and lets the worker go.
bool WorkerHandle::hold_more(std::uint64_t bytes) {
  std::optional<InflightBytes::Reservation>& held = job_->answer_held;
  if (!held || held->grow_to(held->held() + bytes)) return true;
  const char* flag = held->tenant_refused() ? "--max-inflight-bytes-per-tenant" : "--max-inflight-bytes";
  const std::uint64_t needed = held->held() + bytes;
  job_->answer_refused = true;
  kill_tree();
  if (!held->could_hold(needed))
    finish(fail(ErrorKind::response_too_large,
                "the program ran, but its answer takes " + std::to_string(needed) + " bytes of the server's memory " +
                    "as it is made, more than " + flag + " allows; return less, or large data as bytes"));
  else
    finish(fail(ErrorKind::busy, "the program ran, but its answer, " + std::to_string(needed) +
                                     " bytes of the server's memory as it is made, did not fit in what the server "
                                     "holds in flight now (" + std::string(flag) + "); retry later"));
  let_go();
  return false;
}

// A large result's output, read: no more than its object said when its answer was held,
// and what its JSON's escapes take is held too (three times: as in hold_answer).
bool WorkerHandle::settle_answer(const messages::Message& message, std::uint64_t output_excess) {
  const auto* result = std::get_if<messages::RunResult>(&message);
  if (result == nullptr) return true;
  if (result->stdout_text.size() + result->stderr_text.size() > held_output_) {
    violation("a result's output longer than its frame said when it came");
    return false;
  }
  return output_excess == 0 || hold_more(3 * output_excess);
}

void WorkerHandle::decode_elsewhere(Frame frame, std::size_t max_object) {
  decoding_ = true;
  // The strand, keeping its io running until the frame comes back.
  auto home = boost::asio::prefer(strand_, boost::asio::execution::outstanding_work.tracked);
  // The job too, whose answer's hold counts the frame: should the job be answered while the
  // frame is read (its client gone, the server stopping), the hold lasts as long as the frame.
  boost::asio::post(*long_steps_, [self = shared_from_this(), home, frame = std::move(frame), job = job_,
                                    max_bytes = channel_.max_text_bytes(), max_object]() mutable {
    Decoded decoded{read_message(frame, max_bytes, max_object), std::move(frame.fds), std::nullopt, 0};
    if (decoded.message)
      if (const auto* result = std::get_if<messages::RunResult>(&*decoded.message)) {
        decoded.checked = check_returned_values(result->results, result->part_sizes.size());
        decoded.output_excess = output_json_excess(*result);
      }
    boost::asio::post(home, [self, decoded = std::move(decoded)]() mutable { self->decoded(std::move(decoded)); });
  });
}

// A frame decoded elsewhere, handled in its turn; then what waited for it: a deadline
// that passed meanwhile, the exit notice, or the next frames.
void WorkerHandle::decoded(Decoded decoded) {
  decoding_ = false;
  if (state_ == State::gone) return;  // killed or let go meanwhile
  if (!decoded.message) return violation(decoded.message.error().message);
  if (!settle_answer(*decoded.message, decoded.output_excess)) return;
  handle({std::move(*decoded.message), std::move(decoded.fds)}, decoded.checked ? &*decoded.checked : nullptr);
  if (state_ == State::gone) return;
  if (std::exchange(deadline_passed_, false) && job_) return time_out();
  if (exit_notice_) return finish_exit();
  if (!closed_) read();
}

void WorkerHandle::handle(messages::Received received, const std::expected<void, ReturnedValuesRefusal>* checked) {
  if (job_ && messages_left_-- == 0) return violation("it sent more messages than its program explains");
  std::visit(
      [&](auto& message) {
        using T = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<T, messages::Ready>) on_ready();
        else if constexpr (std::is_same_v<T, messages::InitLease>) on_init_lease(message.acquire);
        else if constexpr (std::is_same_v<T, messages::Progress>) on_progress(message.index);
        else if constexpr (std::is_same_v<T, messages::Lease>) on_lease(message.acquire);
        else if constexpr (std::is_same_v<T, messages::GpuAccess>) on_gpu_access();
        else if constexpr (std::is_same_v<T, messages::RunResult>)
          on_result(std::move(message), std::move(received.fds), checked);
        else if constexpr (std::is_same_v<T, messages::Failed>) on_failed(message.message);
        else violation("a worker does not send '" + std::string(messages::name_of(received.message)) + "'");
      },
      received.message);
}

void WorkerHandle::on_ready() {
  if (state_ != State::starting && state_ != State::recycling) return violation("'ready' while not starting");
  if (init_turn_asked_ || init_turn_held_) return violation("'ready' while holding a context-making turn");
  bool first = state_ == State::starting;
  state_ = State::idle;
  if (first) {
    ready_deadline_.cancel();
    if (!alive_ && events_.alive) events_.alive(shared_from_this());
    alive_ = true;
    if (events_.started) events_.started(shared_from_this());
    if (state_ != State::idle) return;  // the owner let it go meanwhile
  }
  events_.idle(shared_from_this());
}

void WorkerHandle::on_init_lease(bool acquire) {
  if (state_ != State::starting) return violation("'init_lease' after starting");
  if (!acquire) {
    if (!init_turn_held_) return violation("gave back a context-making turn it does not hold");
    init_turn_held_ = false;
    leases_.release_init(gpus_, pid_);
    return;
  }
  if (init_turn_asked_ || init_turn_held_) return violation("asked twice for a context-making turn");
  init_turn_asked_ = true;
  // Its interpreter runs (it asks just before it makes its CUDA context): enough for the
  // server's start, which need not wait on CUDA.
  if (!alive_) {
    alive_ = true;
    if (events_.alive) events_.alive(shared_from_this());
    if (state_ != State::starting) return;
  }
  // Waiting for the turn is other workers' time, not this start's.
  ready_remaining_ = std::max(Clock::duration::zero(), ready_deadline_at_ - Clock::now());
  ready_deadline_.cancel();
  leases_.acquire_init(gpus_, pid_, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self || !self->init_turn_asked_ || self->state_ == State::gone) return;
    self->init_turn_asked_ = false;
    self->init_turn_held_ = true;
    self->arm_ready_deadline(self->ready_remaining_);
    self->send_grant();
  });
}

void WorkerHandle::on_progress(std::uint64_t index) {
  if (state_ != State::running) return violation("'progress' without a job");
  if (index >= job_->admitted.program.instructions().size()) return violation("progress past the program's end");
  if (progress_ && index <= *progress_) return violation("progress that goes back");
  progress_ = index;
}

void WorkerHandle::on_lease(bool acquire) {
  if (state_ != State::running) return violation("'lease' without a job");
  if (!acquire) {
    if (lease_ != LeaseState::held) return violation("gave back a GPU lease it does not hold");
    lease_ = LeaseState::none;
    leases_.release_program(pid_);
    return;
  }
  if (lease_ != LeaseState::none) return violation("asked twice for the GPU lease");
  lease_ = LeaseState::waiting;
  pause_deadline();
  // Granted now or inside another worker's release: either way continue on a fresh turn
  // of the strand, and only if this job still waits.
  auto granted = [strand = strand_, weak = weak_from_this(), job = job_] {
    boost::asio::post(strand, [weak, job] {
      auto self = weak.lock();
      if (!self || self->job_ != job || self->lease_ != LeaseState::waiting) return;
      self->lease_ = LeaseState::held;
      self->resume_deadline();
      self->send_grant();
    });
  };
  if (auto status = leases_.acquire_program(gpus_, pid_, granted); !status) violation(status.error().message);
}

void WorkerHandle::on_gpu_access() {
  if (state_ != State::running) return violation("'gpu_access' without a job");
  if (interfered_request_id_) return;
  // A cpu_only call used a GPU: note whose program held one of the worker's at that moment.
  // Whose program held the GPU is told only to a program of the same tenant.
  if (auto holder = leases_.program_holder(gpus_, pid_))
    if (auto other = events_.job_of(*holder); other && other->tenant == job_->tenant)
      interfered_request_id_ = other->request_id;
}

void WorkerHandle::on_failed(const std::string& message) {
  if (state_ != State::starting) return violation("'failed' after starting");
  // Its own words: the sandbox or the device could not be set up (a limit too low for it,
  // say). Bounded, as everything a worker sends.
  start_failed(message.substr(0, 2000));
  let_go();
}

// `checked`: its values' check, when it was made where the result was decoded.
void WorkerHandle::on_result(messages::RunResult message, std::vector<UniqueFd> fds,
                             const std::expected<void, ReturnedValuesRefusal>* checked_elsewhere) {
  if (state_ != State::running) return violation("'result' without a job");
  auto checked = checked_elsewhere != nullptr ? *checked_elsewhere
                                              : check_returned_values(message.results, message.part_sizes.size());
  if (!checked) {
    if (checked.error().error.kind != ErrorKind::serialization) return violation(checked.error().error.message);
    // Deeper than the worker's own encoder lets values nest: a worker that sends this runs
    // no other program.
    std::fprintf(stderr, "kcoral-server: worker %d sent returned values nested too deep; killed\n",
                 static_cast<int>(pid_));
    kill_tree();
    finish(too_deep(checked.error(), std::move(message), job_->admitted.program));
    return let_go();
  }
  bool continues = message.continues;
  bool multi_stream = message.multi_stream;
  std::string retired = continues ? std::string() : std::move(message.retired);
  auto result = decode_result(std::move(message), std::move(fds), *job_, interfered_request_id_);
  if (!result) return violation(result.error().message);
  // Whether the worker takes another program is the front's call as much as the worker's.
  bool recycle = continues && ++programs_run_ < limits_.programs;
  if (recycle) state_ = State::recycling;
  finish(std::move(*result), std::move(retired), multi_stream);
  if (!recycle) let_go();
}

void WorkerHandle::send_grant() {
  if (!messages::send(channel_, messages::LeaseGranted{})) kill_tree();  // its channel tells the rest
}

bool WorkerHandle::run(std::shared_ptr<ExecuteJob> job) {
  if (state_ != State::idle) return false;
  if (!send_job(channel_, *job)) {
    // The child died before it could take the job: the job goes back, the child goes.
    kill_tree();
    let_go();
    return false;
  }
  job_ = std::move(job);
  state_ = State::running;
  dispatched_ = Clock::now();
  progress_.reset();
  interfered_request_id_.reset();
  lease_ = LeaseState::none;
  // A progress per instruction, a lease asked and given back per instruction, a few more.
  messages_left_ = 16 + 3 * job_->admitted.program.instructions().size();
  start_deadline();
  return true;
}

void WorkerHandle::violation(const std::string& why) {
  std::fprintf(stderr, "kcoral-server: worker %d broke the channel protocol (%.300s); killed\n",
               static_cast<int>(pid_), why.c_str());
  kill_tree();
  if (state_ == State::starting) start_failed("a starting worker broke the channel protocol (" + why.substr(0, 300) + ")");
  if (job_)
    finish(fail(ErrorKind::engine, "the worker running this program broke the channel protocol (" +
                                       why.substr(0, 300) + ") and was killed"));
  let_go();
}

void WorkerHandle::channel_closed() {
  closed_ = true;
  boost::system::error_code ignored;
  readable_.close(ignored);
  if (state_ == State::starting) {
    // It ended before it was ready; the exit notice says how (exit code, signal, out of
    // memory), unless it does not come.
    grace_.expires_after(kExitNoticeGrace);
    grace_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->state_ != State::starting) return;
      self->kill_tree();
      self->start_failed("a worker exited before it became ready");
      self->let_go();
    });
    return;
  }
  if (!job_) return let_go();
  // Died mid-program. The zygote reports how (a signal, say) an instant later; wait
  // briefly for that, so the error can say it.
  grace_.expires_after(kExitNoticeGrace);
  grace_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && self->job_) self->crashed("");
  });
}

void WorkerHandle::exited(const std::string& how, const std::optional<std::string>& failure) {
  exit_notice_ = ExitNotice{how, failure};
  if (!decoding_) finish_exit();  // else once the frame being decoded is handled
}

// The exit notice can overtake the child's last messages (its result, say, or why it
// could not start), which are still in its channel: those are taken first.
void WorkerHandle::finish_exit() {
  while (!closed_ && (job_ || state_ == State::starting) && state_ != State::gone) {
    Took took = take_frame();
    if (took == Took::stop) return;  // let go, or decoding elsewhere: decoded() comes back here
    if (took != Took::one) break;
  }
  const ExitNotice& notice = *exit_notice_;
  if (job_) crashed(notice.how, notice.failure);
  if (state_ == State::starting)
    start_failed("a worker exited before it became ready (" + notice.how + ")" +
                 (notice.failure ? ": " + *notice.failure : ""));
  let_go();
}

// Reports a start that ended before `ready`; let_go() follows, so it is reported once.
void WorkerHandle::start_failed(const std::string& why, bool timed_out) {
  if (state_ != State::starting) return;
  ready_deadline_.cancel();
  if (events_.start_failed) events_.start_failed(shared_from_this(), why, timed_out);
}

void WorkerHandle::crashed(const std::string& how, const std::optional<std::string>& failure) {
  kill_tree();
  std::shared_ptr<ExecuteJob> job = job_;
  const auto& instructions = job->admitted.program.instructions();
  // Without a progress, the program had not started; unless the zygote knows it failed
  // (out of memory), whatever it was doing.
  std::optional<std::uint64_t> index = progress_;
  if (!index && failure && !instructions.empty()) index = 0;
  if (!index) {
    finish(fail(ErrorKind::engine, "the worker exited before it ran the program" +
                                       (how.empty() ? std::string() : " (" + how + ")")));
  } else {
    const Instruction& instruction = instructions[*index];
    ProgramResult result;
    InstructionError error;
    error.kind = ErrorKind::runtime;
    error.message = failure.value_or("worker exited while executing the instruction");
    error.instruction_index = *index;
    error.instruction_op = op_name(instruction);
    if (auto id = instruction_id(instruction)) error.instruction_id = std::string(*id);
    if (!how.empty()) error.traceback = "The worker process ended: " + how + ".\n";
    result.error = std::move(error);
    finish(std::move(result));
  }
  let_go();
}

void WorkerHandle::finish(Result<ProgramResult> result, std::string worker_retired, bool multi_stream) {
  std::shared_ptr<ExecuteJob> job = std::move(job_);
  if (!job) return;
  deadline_.cancel();
  paused_remaining_.reset();
  grace_.cancel();
  lease_ = LeaseState::none;
  // Whatever the worker holds comes back here, also when it was killed.
  LeaseTimes lease = leases_.finish(gpus_, pid_);
  ResponseTimings timings{ms_between(job->received, dispatched_), ms_between(dispatched_, Clock::now()),
                          lease.wait_ms, lease.held_ms};
  events_.finished(shared_from_this(), std::move(job),
                   {std::move(result), timings, std::move(worker_retired), {}, multi_stream});
}

void WorkerHandle::discard() {
  kill_tree();
  job_.reset();
  let_go();
}

void WorkerHandle::abort(const Error& error) {
  kill_tree();
  finish(std::unexpected(error));
  let_go();
}

void WorkerHandle::let_go() {
  if (state_ == State::gone) return;
  state_ = State::gone;
  closed_ = true;
  deadline_.cancel();
  grace_.cancel();
  ready_deadline_.cancel();
  boost::system::error_code ignored;
  readable_.close(ignored);
  channel_ = Channel();
  // Killed, not trusted to exit: what it says comes from the program's process, whose code
  // can be made to send a result (or anything) early and run on, past its timeout, with
  // its GPU lease given back and its slot another worker's. A worker exits at once after
  // its last result anyway (_exit, nothing left to run).
  kill_tree();
  init_turn_asked_ = init_turn_held_ = false;
  (void)leases_.finish(gpus_, pid_);
  events_.gone(shared_from_this());
}

void WorkerHandle::kill_tree() const {
  // The child leads its own process group (and, sandboxed, its own PID namespace, which
  // dies with it). Once the zygote has reaped it, nothing is signalled (Process).
  process_.signal_group(SIGKILL);
}

// -- the deadlines --------------------------------------------------------------------------

void WorkerHandle::arm_ready_deadline(Clock::duration remaining) {
  ready_deadline_at_ = Clock::now() + remaining;
  ready_deadline_.expires_at(ready_deadline_at_);
  ready_deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    // Cancelled, paused for a context-making turn, or re-armed since: not this expiry.
    if (ec || self->state_ != State::starting || self->init_turn_asked_ || Clock::now() < self->ready_deadline_at_)
      return;
    self->kill_tree();
    self->start_failed("a worker did not become ready within " +
                           seconds_text(std::chrono::duration<double>(self->limits_.start_timeout).count()) +
                           " of its start, and was killed",
                       /*timed_out=*/true);
    self->let_go();
  });
}

void WorkerHandle::start_deadline() {
  paused_remaining_.reset();
  arm_deadline(seconds_duration(job_->admitted.timeout_seconds));
}

void WorkerHandle::pause_deadline() {
  if (paused_remaining_ || !job_) return;
  paused_remaining_ = std::max(Clock::duration::zero(), deadline_at_ - Clock::now());
  deadline_.cancel();
}

void WorkerHandle::resume_deadline() {
  if (!paused_remaining_) return;
  Clock::duration remaining = *paused_remaining_;
  paused_remaining_.reset();
  arm_deadline(remaining);
}

void WorkerHandle::arm_deadline(Clock::duration remaining) {
  deadline_at_ = Clock::now() + remaining;
  deadline_.expires_at(deadline_at_);
  deadline_.async_wait([self = shared_from_this(), job = job_](boost::system::error_code ec) {
    // A cancelled wait or a re-armed deadline must not fire the old expiry.
    if (ec || self->job_ != job || self->paused_remaining_ || Clock::now() < self->deadline_at_) return;
    if (self->decoding_) {  // what the worker sent before it comes first (decoded())
      self->deadline_passed_ = true;
      return;
    }
    self->time_out();
  });
}

void WorkerHandle::time_out() {
  std::shared_ptr<ExecuteJob> job = job_;
  kill_tree();
  finish(fail(ErrorKind::timeout, "the program ran past its timeout of " +
                                      seconds_text(job->admitted.timeout_seconds) + "; its processes were killed"));
  let_go();
}

}  // namespace kcoral
