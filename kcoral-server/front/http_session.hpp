// HttpSession: one client connection; reads requests, routes them, writes responses.
//
// Beast's shape, with every wait bounded so that no client, however slow, holds the
// server's memory or descriptors for long:
//   - between requests, the idle timeout (a kept-alive connection with nothing to say);
//   - from a request's first byte, the header timeout for the whole header;
//   - the body, read step by step, must bring at least the minimum rate over every window
//     (bytes per second, not one deadline for the whole body): else 408, and close;
//   - before a body is held, its bytes are reserved in the server-wide in-flight budget
//     and in its tenant's part of it (the declared length, or a chunked body's next
//     growth): else 503 with Retry-After.
// While a program runs, the session watches its connection: a client that goes away
// (closes or resets) has its program taken from the queue, or killed if it runs, so that
// nobody can fill the queue with programs whose answers nobody will read.
// A body over the request limit (declared, or chunked as soon as it passes the limit) is
// answered 413 and what the client still sends is drained, for a bounded time, before the
// connection closes, so that the client reads the answer rather than a reset. A session
// accepted past --max-connections (an overflow session) answers one request only: /health
// and /metrics as usual, anything else 503. Lives as long as its pending operations
// (shared_from_this); runs on its own strand.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "router.hpp"

namespace kcoral {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // `overflow`: accepted past the connection limit (see above).
  HttpSession(boost::asio::ip::tcp::socket socket, ServerState& state, bool overflow);
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;
  ~HttpSession();
  void run();

 private:
  using Clock = std::chrono::steady_clock;

  void wait_for_request();
  void evicted();
  void read_header();
  void read_header_bytes();
  void on_header(boost::beast::error_code ec);
  void start_body();
  void read_body();
  [[nodiscard]] boost::beast::error_code parse_buffered_body();
  void reject_body(boost::beast::error_code ec);
  void on_body(boost::beast::error_code ec, std::size_t bytes);
  [[nodiscard]] bool reserve_body();
  [[nodiscard]] Error inflight_full();
  [[nodiscard]] bool count_tenant_connection();
  [[nodiscard]] Status hold_parse(std::uint64_t bytes, std::uint64_t program_bytes);
  void handle(HttpRequest request);
  template <class Step, class Then>
  void run_step(bool takes_long, Step step, Then then);
  void on_routed(unsigned version, bool keep_alive, RouteResult routed);
  void watch_client();
  void on_watch(boost::beast::error_code ec, std::size_t bytes);
  void answer_job(HttpResponse response);
  void write(HttpResponse response);
  void send_response(std::function<void(boost::beast::error_code)> done);
  void send_some();
  void reject_and_close(const Error& error, bool drain = true);
  void drain_then_close();
  void drain(std::size_t drained);
  void close();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<RequestBody>> parser_;
  std::shared_ptr<HttpResponse> response_;  // alive until written
  std::optional<boost::beast::http::response_serializer<ResponseBodyType>> serializer_;
  std::function<void(boost::beast::error_code)> sent_;  // what follows the response's write
  std::size_t header_scanned_ = 0;  // bytes of the buffer searched for the header's end
  std::size_t header_fields_ = 0;   // the request header's, to tell a chunked body's trailer
  std::optional<std::size_t> counted_tenant_;  // whose connection it is counted as (tenant_connections)
  std::shared_ptr<ExecuteJob> answered_job_;   // whose answer's hold write() takes over
  std::shared_ptr<boost::beast::http::response<boost::beast::http::empty_body>> continue_;
  ServerState& state_;
  const bool overflow_;
  std::string peer_;  // the client's address and port
  InflightBytes::Reservation held_;  // this request's bytes, until its response is written
  std::uint64_t parse_held_ = 0;      // of them, what its program part's parse holds (hold_parse)
  std::optional<std::size_t> tenant_;  // whose request this is, from its header (none: no accepted token)
  std::string address_;              // the client's address alone, for the anonymous pool
  // Held while, on a server with tokens, no request on this connection has shown one.
  AnonymousConnections::Ticket anonymous_;
  Clock::time_point window_start_;   // the body rate's current window
  std::uint64_t window_bytes_ = 0;
  // A body read's own timer: unlike the stream's timeout, it leaves the socket open, so a
  // stalled client still gets its 408.
  boost::asio::steady_timer body_timer_;
  std::uint64_t body_reads_ = 0;  // which read the timer is for
  bool body_stalled_ = false;
  bool close_after_write_ = false;
  bool answering_job_ = false;  // the response being awaited or written is a job's
  std::weak_ptr<ExecuteJob> job_;  // the job being awaited
  bool watching_ = false;          // a read watches the connection while the job runs
  bool client_gone_ = false;
  // A read found the connection's end (the client closed its side) but could not act on it
  // (a response was waiting): no byte can come any more, and Asio will not report the end
  // a second time (a read after it waits for a readiness that never comes), so the session
  // must not read again.
  bool input_ended_ = false;
  std::optional<HttpResponse> waiting_response_;  // ready while the watching read ends
  Clock::time_point drain_deadline_;
  std::vector<char> scratch_;  // for draining a rejected body
};

}  // namespace kcoral
