// Listener: accepts connections and starts an HttpSession for each.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "router.hpp"

namespace kcoral {

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(boost::asio::io_context& io, ServerState& state);
  // Binds and listens; returns the port actually bound (for port 0).
  [[nodiscard]] Result<std::uint16_t> open(const boost::asio::ip::tcp::endpoint& endpoint);
  void run();
  void stop();

 private:
  void accept();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  ServerState& state_;
};

}  // namespace kcoral
