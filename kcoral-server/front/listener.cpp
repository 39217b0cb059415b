// Listener: the accept loop.
#include "listener.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <cstdio>

#include "descriptors.hpp"
#include "http_session.hpp"

namespace kcoral {

Listener::Listener(boost::asio::io_context& io, ServerState& state)
    : io_(io), acceptor_(boost::asio::make_strand(io)), backoff_(acceptor_.get_executor()), state_(state) {}

Result<std::uint16_t> listen_on(boost::asio::ip::tcp::acceptor& acceptor, const boost::asio::ip::tcp::endpoint& endpoint) {
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec)
    return fail(ErrorKind::engine, "cannot listen on " + endpoint.address().to_string() + ":" +
                                       std::to_string(endpoint.port()) + ": " + ec.message());
  return acceptor.local_endpoint().port();
}

bool out_of_resources(const boost::system::error_code& ec) {
  return ec == boost::asio::error::no_descriptors || ec == boost::asio::error::no_buffer_space ||
         ec == boost::asio::error::no_memory || ec.value() == ENFILE;
}

Result<std::uint16_t> Listener::open(const boost::asio::ip::tcp::endpoint& endpoint) {
  return listen_on(acceptor_, endpoint);
}

void Listener::run() { accept(); }

void Listener::stop() {
  boost::asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
    boost::system::error_code ec;
    self->acceptor_.close(ec);
  });
}

void Listener::accept() {
  acceptor_.async_accept(boost::asio::make_strand(io_),
                         [self = shared_from_this()](boost::system::error_code ec, boost::asio::ip::tcp::socket socket) {
                           self->on_accept(ec, std::move(socket));
                         });
}

void Listener::on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket) {
  if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) {
    if (!out_of_resources(ec)) return accept();  // a connection gone before it was taken
    // Out of descriptors or memory: the pending connections stay in the backlog until
    // some are free.
    state_.metrics.record(Metrics::Guard::accept_backoff);
    backoff_.expires_after(std::chrono::milliseconds(50));
    return backoff_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && self->acceptor_.is_open()) self->accept();
    });
  }
  std::size_t connections = state_.connections.load();
  if (connections >= state_.config.max_connections + kOverflowConnections) {
    state_.metrics.record(Metrics::Guard::over_connection_limit);
    socket.close(ec);
  } else {
    socket.set_option(boost::asio::ip::tcp::no_delay(true), ec);
    std::make_shared<HttpSession>(std::move(socket), state_, connections >= state_.config.max_connections)->run();
  }
  accept();
}

}  // namespace kcoral
