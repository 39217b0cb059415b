// HttpSession: one client connection; reads requests, routes them, writes responses.
//
// Beast's shape: a timeout is armed before every read and write; a request's header is
// read first (idle keep-alive timeout), then its body (bounded by the request limit and a
// longer timeout). A body over the limit is answered 413 and the rest of it drained
// before the connection closes, so the client reads the answer rather than a reset.
// Lives as long as its pending operations (shared_from_this); runs on its own strand.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>
#include <vector>

#include "router.hpp"

namespace kcoral {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, ServerState& state);
  void run();

 private:
  void read_header();
  void on_header(boost::beast::error_code ec);
  void read_body();
  void on_body(boost::beast::error_code ec);
  void handle(HttpRequest request);
  void write(HttpResponse response);
  void reject_and_close(const Error& error);
  void drain_then_close();
  void drain(std::size_t drained);
  void close();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<HttpResponse> response_;  // alive until written
  std::shared_ptr<boost::beast::http::response<boost::beast::http::empty_body>> continue_;
  ServerState& state_;
  bool close_after_write_ = false;
  bool answering_job_ = false;  // the response being awaited or written is a job's
  std::vector<char> scratch_;  // for draining a rejected body
};

}  // namespace kcoral
