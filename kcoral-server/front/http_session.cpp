// HttpSession: the request/response loop of one connection.
#include "http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <algorithm>
#include <cerrno>
#include <utility>

#include "kcoral/request_id.hpp"

namespace kcoral {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;

constexpr auto kDrainTime = std::chrono::seconds(10);      // of a rejected body, in all
constexpr std::size_t kHeaderLimit = 64 * 1024;
// Beast keeps each field in a node of its own, about 84 bytes for a field of 4 (`a:b`):
// 64 KiB of them took 900 KB a connection, and the CPU of an I/O thread to parse. Requests
// carry a dozen; a few proxies' worth more stay far below this.
constexpr std::size_t kHeaderFieldLimit = 128;
constexpr std::size_t kDrainLimit = std::size_t{4} << 30;  // of a rejected body
// The most bytes of a body one read takes from the socket. Beast's own body reads take 64
// KiB, and the reader's wake-up for each one cost more than the bytes: a 64 MiB body came at
// a third of loopback's pace. The read buffer shrinks back once the body is in.
constexpr std::size_t kBodyReadBytes = 256 * 1024;
// A chunked body is reserved this much ahead; one read adds far less (kBodyReadBytes), so
// the body never grows behind the budget's back.
constexpr std::size_t kChunkedHeadroom = std::size_t{1} << 20;
static_assert(kBodyReadBytes < kChunkedHeadroom);
// Bytes a client may send ahead (its next request) while its program runs; past them the
// connection is no longer watched.
constexpr std::size_t kWatchLimit = 64 * 1024;

// The client closed or reset the connection (mid-request too): nobody to answer.
bool is_gone(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == boost::asio::error::eof ||
         ec == boost::asio::error::connection_reset || ec == boost::asio::error::operation_aborted;
}

// The body's memory file could not be made or grown (RequestBody): the server's state of
// the moment, not the client's fault.
bool is_out_of_memory(beast::error_code ec) { return ec == beast::error_code(ENOMEM, beast::generic_category()); }

Error no_memory_for_body() {
  return {ErrorKind::busy, "the server has no memory for this request's body now; retry later"};
}

}  // namespace

HttpSession::HttpSession(boost::asio::ip::tcp::socket socket, ServerState& state, bool overflow)
    : stream_(std::move(socket)),
      state_(state),
      overflow_(overflow),
      held_(state.inflight),
      body_timer_(stream_.get_executor()) {
  ++state_.connections;
  beast::error_code ec;
  auto endpoint = stream_.socket().remote_endpoint(ec);
  if (!ec) {
    address_ = endpoint.address().to_string();
    peer_ = address_ + ":" + std::to_string(endpoint.port());
  }
}

HttpSession::~HttpSession() {
  if (counted_tenant_) --state_.tenant_connections[*counted_tenant_];
  --state_.connections;
}

// Counts this connection as its request's tenant's, from the first request that shows a
// token (a later one with another token moves it). False: that tenant holds its most.
bool HttpSession::count_tenant_connection() {
  if (tenant_ == counted_tenant_) return true;
  if (counted_tenant_) --state_.tenant_connections[*std::exchange(counted_tenant_, std::nullopt)];
  if (!tenant_) return true;
  std::atomic<std::size_t>& held = state_.tenant_connections[*tenant_];
  const std::size_t limit = tenant_connection_limit(state_.config, state_.tenants.size());
  std::size_t now = held.load();
  do {
    if (now >= limit) return false;
  } while (!held.compare_exchange_weak(now, now + 1));
  counted_tenant_ = tenant_;
  return true;
}

void HttpSession::run() {
  if (state_.tenants.need_tokens()) {
    // Anonymous until a request shows a token: in the pool that keeps such connections
    // from the slots of those that have (anonymous_connections.hpp).
    auto ticket = state_.anonymous.admit(address_, [weak = weak_from_this()] {
      if (auto self = weak.lock())
        boost::asio::post(self->stream_.get_executor(), [self] { self->evicted(); });
    });
    if (!ticket) {
      state_.metrics.record(Metrics::Guard::anonymous_per_address);
      return close();
    }
    anonymous_ = std::move(*ticket);
  }
  boost::asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

// Closed for a newer anonymous connection, unless a token came meanwhile.
void HttpSession::evicted() {
  if (!anonymous_.held()) return;
  state_.metrics.record(Metrics::Guard::anonymous_evicted);
  anonymous_.leave();
  close();
}

// Waits for a request's first byte (the idle timeout), unless it is already here.
void HttpSession::wait_for_request() {
  if (buffer_.size() > 0) return read_header();
  if (input_ended_) return close();
  double idle_seconds = overflow_            ? state_.config.header_timeout_seconds
                        : anonymous_.held() ? state_.config.anonymous_idle_timeout_seconds
                                            : state_.config.idle_timeout_seconds;
  stream_.expires_after(seconds_duration(idle_seconds));
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
    if (ec == beast::error::timeout) self->state_.metrics.record(Metrics::Guard::idle_timeout);
    if (ec) return self->close();
    self->buffer_.commit(n);
    self->read_header();
  });
}

// The whole header is read into the buffer before Beast parses it, so that its raw lines
// can be checked for what Beast would accept silently: obs-fold (a field continued on a
// line that starts with a space or a tab), which Beast unfolds, in Content-Length too.
// RFC 9112 lets a server refuse it, and a request smuggler relies on servers that disagree
// on what a folded field says.
void HttpSession::read_header() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(state_.config.max_request_bytes);
  stream_.expires_after(seconds_duration(state_.config.header_timeout_seconds));
  header_scanned_ = 0;
  read_header_bytes();
}

void HttpSession::read_header_bytes() {
  std::string_view buffered(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  // Searched from where the last search ended (less the three bytes an end may straddle).
  std::size_t end = buffered.find("\r\n\r\n", header_scanned_ > 3 ? header_scanned_ - 3 : 0);
  if (end == std::string_view::npos) {
    header_scanned_ = buffered.size();
    if (buffered.size() > kHeaderLimit) return on_header(http::error::header_limit);
    if (input_ended_) return on_header(http::error::partial_message);
    return stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec) return self->on_header(ec == boost::asio::error::eof ? http::error::partial_message : ec);
      self->buffer_.commit(n);
      self->read_header_bytes();
    });
  }
  std::string_view header = buffered.substr(0, end + 2);
  if (static_cast<std::size_t>(std::count(header.begin(), header.end(), '\n')) > kHeaderFieldLimit + 1)
    return reject_and_close({ErrorKind::parse, "malformed HTTP request: the header has more than " +
                                                   std::to_string(kHeaderFieldLimit) + " fields"});
  bool folded = header.find("\n ") != std::string_view::npos || header.find("\n\t") != std::string_view::npos;
  // All of it is in the buffer: Beast parses it without reading (a folded header too, so
  // that its refusal is recorded with its target, as every other is).
  http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this(), folded](beast::error_code ec,
                                                                                          std::size_t) {
    if (folded)  // whatever Beast made of it
      return self->reject_and_close({ErrorKind::parse, "malformed HTTP request: a header field is folded onto a "
                                                       "line that starts with a space or a tab (obs-fold); send "
                                                       "each field on one line"});
    self->on_header(ec);
  });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec == beast::error::timeout) {
    state_.metrics.record(Metrics::Guard::header_timeout);
    return close();
  }
  if (is_gone(ec)) return close();
  if (ec == http::error::body_limit)
    return reject_and_close({ErrorKind::request_too_large,
                             "the request body is larger than the server's limit of " +
                                 std::to_string(state_.config.max_request_bytes) + " bytes"});
  if (is_out_of_memory(ec)) return reject_and_close(no_memory_for_body());
  if (ec) return reject_and_close({ErrorKind::parse, "malformed HTTP request: " + ec.message()});
  const auto& header = parser_->get();
  header_fields_ = static_cast<std::size_t>(std::distance(header.begin(), header.end()));
  if (overflow_) {
    close_after_write_ = true;
    auto target = header.target();
    if (header.method() != http::verb::get || (!target.starts_with("/health") && !target.starts_with("/metrics"))) {
      state_.metrics.record(Metrics::Guard::over_connection_limit);
      return reject_and_close({ErrorKind::busy, "the server has too many connections (it serves " +
                                                    std::to_string(state_.config.max_connections) +
                                                    " at once); retry"});
    }
  }
  tenant_ = tenant_of(header, state_);
  if (anonymous_.held() && tenant_) anonymous_.leave();
  if (auto refused = check_access(header, state_)) return reject_and_close(*refused);
  if (!count_tenant_connection()) {
    state_.metrics.record(Metrics::Guard::tenant_connections_full);
    return reject_and_close({ErrorKind::busy, "this token's tenant holds " +
                                                  std::to_string(tenant_connection_limit(state_.config,
                                                                                         state_.tenants.size())) +
                                                  " connections, the most one tenant may "
                                                  "(--max-connections-per-tenant); reuse or close its idle ones"});
  }
  // Its bytes are its tenant's too (a /health without a token: the server's alone).
  held_.set_tenant(tenant_ ? state_.tenant_inflight.at(*tenant_).get() : nullptr);
  // Reserve before the client is told to send (100-continue) or anything is read.
  if (!reserve_body()) return reject_and_close(inflight_full());
  if (beast::iequals(header[http::field::expect], "100-continue")) {
    continue_ = std::make_shared<http::response<http::empty_body>>(http::status::continue_, header.version());
    stream_.expires_after(seconds_duration(state_.config.header_timeout_seconds));
    return http::async_write(stream_, *continue_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->start_body();
    });
  }
  start_body();
}

Error HttpSession::inflight_full() {
  if (held_.tenant_refused()) {
    state_.metrics.record(Metrics::Guard::tenant_inflight_full);
    return {ErrorKind::busy, "your requests in flight hold too many bytes at once (one tenant may hold " +
                                 std::to_string(state_.tenant_inflight.at(*tenant_)->limit()) +
                                 " bytes, --max-inflight-bytes-per-tenant); retry once some of them are answered"};
  }
  state_.metrics.record(Metrics::Guard::inflight_full);
  return {ErrorKind::busy, "the server holds too many request bytes at once (its budget is " +
                               std::to_string(state_.inflight.limit()) + " bytes); retry"};
}

// Holds this request's body in the in-flight budget before it is read: its declared
// length whole, or a chunked body's next growth (RequestBody grows without a copy, so what
// it holds is what it costs).
bool HttpSession::reserve_body() {
  if (parser_->is_done()) return true;
  if (auto length = parser_->content_length()) return held_.grow_to(*length);
  std::uint64_t size = parser_->get().body().bytes.size();
  if (held_.held() >= size + kChunkedHeadroom) return true;
  return held_.grow_to(std::min<std::uint64_t>(size + 2 * kChunkedHeadroom,
                                               state_.config.max_request_bytes + kChunkedHeadroom));
}

void HttpSession::start_body() {
  window_start_ = Clock::now();
  window_bytes_ = 0;
  body_stalled_ = false;
  read_body();
}

// One step of the body, at most one rate window long: the bytes buffered so far parsed, then
// one read of at most kBodyReadBytes.
void HttpSession::read_body() {
  if (beast::error_code ec = parse_buffered_body()) return reject_body(ec);
  if (parser_->is_done()) {
    // A chunked body's trailer fields join the header's; bounded as those are, though only
    // once parsed (the trailer's bytes are bounded below while it comes).
    const auto& fields = parser_->get();
    if (static_cast<std::size_t>(std::distance(fields.begin(), fields.end())) > header_fields_ + kHeaderFieldLimit)
      return reject_and_close({ErrorKind::parse, "malformed HTTP request: the trailer has more than " +
                                                     std::to_string(kHeaderFieldLimit) + " fields"});
    buffer_.shrink_to_fit();
    return handle(parser_->release());
  }
  // What the parser leaves buffered is the start of a chunk's size line or of the
  // trailer, which the parser bounds nowhere: bounded here as the request's header is.
  if (buffer_.size() > kHeaderLimit)
    return reject_and_close({ErrorKind::parse, "malformed HTTP request: a chunk's size line (with its extensions) "
                                               "or the trailer is longer than " +
                                                   std::to_string(kHeaderLimit) + " bytes"});
  if (!reserve_body()) return reject_and_close(inflight_full());
  if (input_ended_) return close();  // mid-body: a body ends at its length, not at the connection's end
  stream_.expires_never();
  body_timer_.expires_after(seconds_duration(state_.config.body_rate_window_seconds));
  body_timer_.async_wait([self = shared_from_this(), read = ++body_reads_](boost::system::error_code ec) {
    if (ec || read != self->body_reads_) return;
    self->body_stalled_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
  std::size_t room = kBodyReadBytes;
  if (auto left = parser_->content_length_remaining()) room = std::clamp<std::uint64_t>(*left, 1, room);
  stream_.async_read_some(buffer_.prepare(room), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
    self->buffer_.commit(n);
    self->on_body(ec, n);
  });
}

// Hands the buffered bytes to the parser, which keeps the body's; what it cannot use yet
// (part of a chunk's header) stays buffered for the next read. The parser's error, if any.
beast::error_code HttpSession::parse_buffered_body() {
  while (buffer_.size() > 0 && !parser_->is_done()) {
    beast::error_code ec;
    std::size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec) return ec;
    if (used == 0) break;
  }
  return {};
}

void HttpSession::reject_body(beast::error_code ec) {
  if (ec == http::error::body_limit)
    return reject_and_close({ErrorKind::request_too_large,
                             "the request body is larger than the server's limit of " +
                                 std::to_string(state_.config.max_request_bytes) + " bytes"});
  if (is_out_of_memory(ec)) return reject_and_close(no_memory_for_body());
  reject_and_close({ErrorKind::parse, "malformed HTTP request: " + ec.message()});
}

void HttpSession::on_body(beast::error_code ec, std::size_t bytes) {
  ++body_reads_;  // the timer of this read may no longer fire
  body_timer_.cancel();
  const double window = state_.config.body_rate_window_seconds;
  const auto minimum = static_cast<std::uint64_t>(static_cast<double>(state_.config.min_body_bytes_per_second) * window);
  auto too_slow = [&] {
    state_.metrics.record(Metrics::Guard::slow_body);
    reject_and_close({ErrorKind::timeout, "the request body came slower than the server's minimum of " +
                                              std::to_string(state_.config.min_body_bytes_per_second) +
                                              " bytes per second over " + seconds_text(window)},
                     /*drain=*/false);
  };
  if (body_stalled_) return too_slow();  // not one byte in a whole window
  if (is_gone(ec)) return close();  // mid-body: a body ends at its length, not at the connection's end
  if (ec) return reject_and_close({ErrorKind::parse, "malformed HTTP request: " + ec.message()});
  window_bytes_ += bytes;
  if (Clock::now() - window_start_ >= seconds_duration(window)) {
    if (window_bytes_ < minimum) return too_slow();
    window_start_ = Clock::now();
    window_bytes_ = 0;
  }
  read_body();
}

// A step whose time grows with what the client or its worker sent runs on the long-step
// threads (ServerState::long_steps), so that it never holds an I/O thread, which every
// connection shares; `then` goes on with its result on this session's strand. Meanwhile
// the step counts as a response pending, which a shutdown waits for, and keeps the I/O
// running. A short step runs here, at once.
template <class Step, class Then>
void HttpSession::run_step(bool takes_long, Step step, Then then) {
  if (!takes_long || state_.long_steps == nullptr) return then(step());
  ++state_.responses_pending;
  auto home = boost::asio::prefer(stream_.get_executor(), boost::asio::execution::outstanding_work.tracked);
  boost::asio::post(*state_.long_steps, [self = shared_from_this(), home, step = std::move(step),
                                         then = std::move(then)]() mutable {
    auto result = step();
    boost::asio::post(home, [self, result = std::move(result), then = std::move(then)]() mutable {
      --self->state_.responses_pending;
      then(std::move(result));
    });
  });
}

// What parsing this request's program takes is held with its body while it parses. A
// program whose own parse of more than 1 MiB passes what this request may ever hold beside
// its body is refused as too large, not as busy, for a retry would not help; the rest (a
// small program's parse, the parts' records, the parser's buffers) is held as far as the
// budget goes, so that a body of --max-request-bytes with a small program passes a budget
// of that size.
Status HttpSession::hold_parse(std::uint64_t bytes, std::uint64_t program_bytes) {
  constexpr std::uint64_t kSmallParse = std::uint64_t{1} << 20;
  std::uint64_t limit = state_.inflight.limit();
  const char* flag = "--max-inflight-bytes";
  if (tenant_ && state_.tenant_inflight.at(*tenant_)->limit() < limit) {
    limit = state_.tenant_inflight.at(*tenant_)->limit();
    flag = "--max-inflight-bytes-per-tenant";
  }
  const std::uint64_t body = held_.held();
  const std::uint64_t room = limit - std::min(limit, body);
  if (program_bytes > room && program_bytes > kSmallParse)
    return fail(ErrorKind::request_too_large,
                "parsing this request's program part would take up to " + std::to_string(program_bytes) +
                    " bytes of the server's memory, which with its " + std::to_string(body) +
                    " bytes passes what one request may hold (" + std::to_string(limit) + " bytes, " + flag +
                    "); send large data as uploads (bytes or tensors) rather than as literal arguments, whose "
                    "every value costs the server dozens of bytes");
  if (!held_.grow_to(body + std::min(bytes, room))) return std::unexpected(inflight_full());
  parse_held_ = held_.held() - body;
  return {};
}

void HttpSession::handle(HttpRequest request) {
  RequestHolds holds;
  // Copies the blob store makes for this program are this request's bytes too, and so is
  // what parsing its program takes, while it parses.
  holds.copies = [this](std::uint64_t bytes) {
    if (held_.grow_to(held_.held() + bytes)) return true;
    state_.metrics.record(held_.tenant_refused() ? Metrics::Guard::tenant_inflight_full
                                                 : Metrics::Guard::inflight_full);
    return false;
  };
  holds.parse.hold = [this](std::uint64_t bytes, std::uint64_t program_bytes) {
    return hold_parse(bytes, program_bytes);
  };
  holds.parse.keep = [this](std::uint64_t kept) {
    std::uint64_t parsing = std::exchange(parse_held_, 0);
    held_.give_back(parsing - std::min(parsing, kept));
  };
  bool takes_long = admission_takes_long(request);
  unsigned version = request.version();
  bool keep_alive = request.keep_alive();
  run_step(
      takes_long,
      [this, request = std::move(request), holds = std::move(holds), takes_long]() mutable {
        RouteResult routed = route(request, state_, peer_, holds);
        return routed.rest && takes_long ? routed.rest() : std::move(routed);  // on a long-step thread already
      },
      [this, version, keep_alive](RouteResult routed) { on_routed(version, keep_alive, std::move(routed)); });
}

void HttpSession::on_routed(unsigned version, bool keep_alive, RouteResult routed) {
  if (routed.rest)
    return run_step(true, std::move(routed.rest), [this, version, keep_alive](RouteResult routed) {
      on_routed(version, keep_alive, std::move(routed));
    });
  if (routed.response) return write(std::move(*routed.response));
  std::shared_ptr<ExecuteJob> job = routed.job;
  stream_.expires_never();  // the program may run for its whole timeout
  answering_job_ = true;
  ++state_.responses_pending;
  job_ = job;
  // Encoding the response (hashing, multipart) runs on this session's strand, not the pool's.
  job->done = [self = shared_from_this(), version, keep_alive](std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
    boost::asio::post(self->stream_.get_executor(), [self, job = std::move(job), outcome = std::move(outcome), version,
                                                     keep_alive]() mutable {
      if (self->client_gone_) {
        record_execute(self->state_, {job->request_id, job->client, 0, std::nullopt, "abandoned", ErrorKind::busy,
                                      "the client went away before its answer", &job->admitted.program, outcome.timings,
                                      std::chrono::duration<double>(Clock::now() - job->received).count(),
                                      job->request_bytes, 0, job->tenant});
        self->answering_job_ = false;
        --self->state_.responses_pending;
        return self->close();
      }
      bool takes_long = answer_takes_long(outcome);
      self->run_step(
          takes_long,
          [self, job, outcome = std::move(outcome), version, keep_alive]() mutable {
            return finish_execute(*job, std::move(outcome), self->state_, version,
                                  keep_alive && !self->state_.stopping);
          },
          [self, job](HttpResponse response) {
            self->answered_job_ = job;  // its answer's hold lasts until write() holds the answer
            self->answer_job(std::move(response));
          });
    });
  };
  state_.pool.submit(std::move(job));
  watch_client();
}

// One read while the program runs: its end (other than by our own cancel) says the client
// went away; bytes it brings are the client's next request, kept for later.
void HttpSession::watch_client() {
  if (input_ended_) return on_watch(boost::asio::error::eof, 0);
  if (buffer_.size() >= kWatchLimit) return;
  watching_ = true;
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
    self->on_watch(ec, n);
  });
}

void HttpSession::on_watch(beast::error_code ec, std::size_t bytes) {
  watching_ = false;
  buffer_.commit(bytes);
  if (ec && ec != boost::asio::error::operation_aborted) input_ended_ = true;
  if (waiting_response_) {  // the answer came: this read was cancelled for it (or ended)
    HttpResponse response = std::move(*waiting_response_);
    waiting_response_.reset();
    return write(std::move(response));
  }
  if (!ec) return watch_client();
  if (ec == boost::asio::error::operation_aborted) return;
  client_gone_ = true;
  if (auto job = job_.lock())
    state_.pool.cancel(std::move(job), {ErrorKind::busy, "the client went away before its answer"});
}

// The job's response, written once the watching read has ended.
void HttpSession::answer_job(HttpResponse response) {
  if (!watching_) return write(std::move(response));
  waiting_response_ = std::move(response);
  stream_.cancel();
}

void HttpSession::write(HttpResponse response) {
  close_after_write_ = close_after_write_ || !response.keep_alive();
  if (close_after_write_) response.keep_alive(false);
  held_.add(response.body().size());  // in memory already: counted, never refused
  if (auto job = std::exchange(answered_job_, nullptr); job && job->answer_held) job->answer_held->release();
  response_ = std::make_shared<HttpResponse>(std::move(response));
  send_response([self = shared_from_this()](beast::error_code ec) {
    self->response_.reset();
    self->held_.release();
    if (self->answering_job_) {
      self->answering_job_ = false;
      --self->state_.responses_pending;
    }
    if (ec || self->close_after_write_) return self->close();
    self->wait_for_request();
  });
}

// Writes response_ step by step, timed as bodies are read: every rate window must take at
// least the minimum rate, or the reader is cut off (its answer dropped and counted), so
// that a client that never reads cannot keep an answer in memory.
void HttpSession::send_response(std::function<void(beast::error_code)> done) {
  serializer_.emplace(*response_);
  sent_ = std::move(done);
  window_start_ = Clock::now();
  window_bytes_ = 0;
  send_some();
}

void HttpSession::send_some() {
  const double window = state_.config.body_rate_window_seconds;
  stream_.expires_after(seconds_duration(window));  // not one byte taken in a whole window
  http::async_write_some(stream_, *serializer_, [self = shared_from_this(), window](beast::error_code ec,
                                                                                    std::size_t bytes) {
    auto too_slow = [&] {
      self->state_.metrics.record(Metrics::Guard::slow_reader);
      std::exchange(self->sent_, nullptr)(beast::error::timeout);
    };
    if (ec == beast::error::timeout) return too_slow();
    if (ec) return std::exchange(self->sent_, nullptr)(ec);
    self->window_bytes_ += bytes;
    if (self->serializer_->is_done()) {
      self->serializer_.reset();
      return std::exchange(self->sent_, nullptr)({});
    }
    if (Clock::now() - self->window_start_ >= seconds_duration(window)) {
      auto minimum = static_cast<std::uint64_t>(static_cast<double>(self->state_.config.min_body_bytes_per_second) * window);
      if (self->window_bytes_ < minimum) return too_slow();
      self->window_start_ = Clock::now();
      self->window_bytes_ = 0;
    }
    self->send_some();
  });
}

void HttpSession::reject_and_close(const Error& error, bool drain) {
  close_after_write_ = true;
  held_.release();  // the body is not kept
  // The client's request id, where its header got that far and it is a canonical UUID.
  std::string request_id;
  if (parser_) {  // the fields parsed so far, even when the header failed a limit
    auto sent = parser_->get()["X-Request-ID"];
    std::string value(sent.data(), sent.size());
    if (is_canonical_request_id(value)) request_id = value;
  }
  if (request_id.empty()) request_id = new_request_id();
  response_ = std::make_shared<HttpResponse>(error_response(error, 11, false, request_id));
  // The one timeout a session reports is the client's own: 408, not a program's 504.
  if (error.kind == ErrorKind::timeout) response_->result(http::status::request_timeout);
  if (parser_ && parser_->get().target().starts_with("/execute")) {
    // Anonymous unless the fields parsed so far carry an accepted token (an open server's
    // one tenant is everyone's): who shows none must not rotate the clients' lines away.
    std::optional<std::size_t> tenant =
        error.kind == ErrorKind::unauthorized ? std::nullopt : tenant_of(parser_->get(), state_);
    record_execute(state_, {request_id, peer_, static_cast<int>(response_->result_int()), ResponseStatus::error, {}, error.kind,
                            error.message, nullptr, {}, 0, 0, response_->body().size(), tenant});
  }
  send_response([self = shared_from_this(), drain](beast::error_code ec) {
    if (ec || !drain) return self->close();
    self->drain_then_close();
  });
}

// Reads and discards what the client still sends, for a bounded time and size, so that
// closing does not reset the connection before the client has read the error.
void HttpSession::drain_then_close() {
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
  scratch_.resize(1 << 16);
  drain_deadline_ = Clock::now() + kDrainTime;
  drain(0);
}

void HttpSession::drain(std::size_t drained) {
  if (input_ended_) return close();
  stream_.expires_at(drain_deadline_);
  stream_.async_read_some(boost::asio::buffer(scratch_),
                          [self = shared_from_this(), drained](beast::error_code ec, std::size_t n) {
                            if (ec || drained + n > kDrainLimit) return self->close();
                            self->drain(drained + n);
                          });
}

void HttpSession::close() {
  body_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
  held_.release();
}

}  // namespace kcoral
