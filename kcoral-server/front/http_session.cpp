// HttpSession: the request/response loop of one connection.
#include "http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/buffers_to_string.hpp>

#include "kcoral/request_id.hpp"

namespace kcoral {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;

constexpr auto kIdleTimeout = std::chrono::seconds(75);
constexpr auto kTransferTimeout = std::chrono::seconds(600);  // a whole body, or a response
constexpr std::size_t kHeaderLimit = 64 * 1024;
constexpr std::size_t kDrainLimit = std::size_t{4} << 30;  // of a rejected body

}  // namespace

HttpSession::HttpSession(boost::asio::ip::tcp::socket socket, ServerState& state)
    : stream_(std::move(socket)), state_(state) {}

void HttpSession::run() {
  boost::asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void HttpSession::read_header() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(state_.config.max_request_bytes);
  stream_.expires_after(kIdleTimeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
      ec == boost::asio::error::connection_reset || ec == boost::asio::error::operation_aborted)
    return close();
  if (ec == http::error::body_limit)
    return reject_and_close({ErrorKind::request_too_large,
                             "the request body is larger than the server's limit of " +
                                 std::to_string(state_.config.max_request_bytes) + " bytes"});
  if (ec) return reject_and_close({ErrorKind::parse, "malformed HTTP request: " + ec.message()});
  const auto& header = parser_->get();
  if (beast::iequals(header[http::field::expect], "100-continue")) {
    continue_ = std::make_shared<http::response<http::empty_body>>(http::status::continue_, header.version());
    stream_.expires_after(kTransferTimeout);
    return http::async_write(stream_, *continue_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->read_body();
    });
  }
  read_body();
}

void HttpSession::read_body() {
  stream_.expires_after(kTransferTimeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (ec == http::error::body_limit)
    return reject_and_close({ErrorKind::request_too_large,
                             "the request body is larger than the server's limit of " +
                                 std::to_string(state_.config.max_request_bytes) + " bytes"});
  if (ec == beast::error::timeout || ec == http::error::end_of_stream ||
      ec == boost::asio::error::connection_reset)
    return close();
  if (ec) return reject_and_close({ErrorKind::parse, "malformed HTTP request: " + ec.message()});
  handle(parser_->release());
}

void HttpSession::handle(HttpRequest request) {
  RouteResult routed = route(request, state_);
  if (routed.response) return write(std::move(*routed.response));
  unsigned version = request.version();
  bool keep_alive = request.keep_alive();
  std::shared_ptr<ExecuteJob> job = routed.job;
  stream_.expires_never();  // the program may run for its whole timeout
  answering_job_ = true;
  ++state_.responses_pending;
  // Encoding the response (hashing, multipart) runs on this session's strand, not the pool's.
  job->done = [self = shared_from_this(), version, keep_alive](std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
    boost::asio::post(self->stream_.get_executor(), [self, job = std::move(job), outcome = std::move(outcome), version,
                                                     keep_alive]() mutable {
      self->write(finish_execute(*job, std::move(outcome), self->state_, version,
                                 keep_alive && !self->state_.stopping));
    });
  };
  state_.pool.submit(std::move(job));
}

void HttpSession::write(HttpResponse response) {
  close_after_write_ = close_after_write_ || !response.keep_alive();
  response_ = std::make_shared<HttpResponse>(std::move(response));
  stream_.expires_after(kTransferTimeout);
  http::async_write(stream_, *response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    self->response_.reset();
    if (self->answering_job_) {
      self->answering_job_ = false;
      --self->state_.responses_pending;
    }
    if (ec || self->close_after_write_) return self->close();
    self->read_header();
  });
}

void HttpSession::reject_and_close(const Error& error) {
  close_after_write_ = true;
  // The client's request id, where its header got that far and it is a canonical UUID.
  std::string request_id;
  if (parser_) {  // the fields parsed so far, even when the header failed a limit
    auto sent = parser_->get()["X-Request-ID"];
    std::string value(sent.data(), sent.size());
    if (is_canonical_request_id(value)) request_id = value;
  }
  response_ = std::make_shared<HttpResponse>(error_response(error, 11, false, request_id));
  if (error.kind == ErrorKind::request_too_large) state_.metrics.record_execute("too_large", 0);
  stream_.expires_after(kTransferTimeout);
  http::async_write(stream_, *response_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
    if (ec) return self->close();
    self->drain_then_close();
  });
}

// Reads and discards what the client still sends, up to a bound, so that closing does
// not reset the connection before the client has read the error.
void HttpSession::drain_then_close() {
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
  scratch_.resize(1 << 16);
  drain(0);
}

void HttpSession::drain(std::size_t drained) {
  stream_.expires_after(std::chrono::seconds(10));
  stream_.async_read_some(boost::asio::buffer(scratch_),
                          [self = shared_from_this(), drained](beast::error_code ec, std::size_t n) {
                            if (ec || drained + n > kDrainLimit) return self->close();
                            self->drain(drained + n);
                          });
}

void HttpSession::close() {
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace kcoral
