// Listener: accepts connections and starts an HttpSession for each.
//
// Past --max-connections, a few more (kOverflowConnections) get an overflow session, which
// answers one request (503 to /execute; /health and /metrics as usual); past those, a
// connection is closed at once. When accept itself fails (out of descriptors, say), the
// listener waits a moment and accepts again, rather than spinning on the error.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>

#include "router.hpp"

namespace kcoral {

// Opens `acceptor` on `endpoint`, binds and listens; the port bound (for port 0).
[[nodiscard]] Result<std::uint16_t> listen_on(boost::asio::ip::tcp::acceptor& acceptor,
                                              const boost::asio::ip::tcp::endpoint& endpoint);
// Whether accept failed for want of descriptors or memory (wait, then accept again) rather
// than because one connection went before it was taken (accept the next at once).
[[nodiscard]] bool out_of_resources(const boost::system::error_code& ec);

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(boost::asio::io_context& io, ServerState& state);
  // Binds and listens; returns the port actually bound (for port 0).
  [[nodiscard]] Result<std::uint16_t> open(const boost::asio::ip::tcp::endpoint& endpoint);
  void run();
  void stop();

 private:
  void accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  ServerState& state_;
};

}  // namespace kcoral
