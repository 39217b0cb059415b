// Agent: the accept loop of the agent-check port, and the weight it answers with.
#include "agent.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <algorithm>
#include <chrono>

#include "listener.hpp"

namespace kcoral {

unsigned agent_weight_percent(const WorkerPool::Load& load) {
  // Counted in GPUs, as the capacity is (workers per GPU): a program of eight GPUs keeps
  // eight workers' worth of the server from others. The new program too, as one.
  std::size_t held = load.gpus_running + load.gpus_waiting + 1;
  std::size_t percent = 100 * load.capacity / held;
  return static_cast<unsigned>(std::clamp<std::size_t>(percent, 1, 100));
}

std::string agent_reply(const WorkerPool::Load& load, bool stopping) {
  return std::to_string(stopping ? 0u : agent_weight_percent(load)) + "%\n";
}

Agent::Agent(boost::asio::io_context& io, const ServerState& state)
    : acceptor_(boost::asio::make_strand(io)), backoff_(acceptor_.get_executor()), state_(state) {}

Result<std::uint16_t> Agent::open(const boost::asio::ip::tcp::endpoint& endpoint) {
  return listen_on(acceptor_, endpoint);
}

void Agent::run() { accept(); }

void Agent::stop() {
  boost::asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
    boost::system::error_code ec;
    self->acceptor_.close(ec);
    self->backoff_.cancel();
  });
}

void Agent::accept() {
  acceptor_.async_accept([self = shared_from_this()](boost::system::error_code ec,
                                                     boost::asio::ip::tcp::socket socket) {
    self->on_accept(ec, std::move(socket));
  });
}

void Agent::on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket) {
  if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
  if (ec) {
    if (!out_of_resources(ec)) return accept();
    // Out of descriptors: the balancer's next check comes soon enough; do not spin.
    backoff_.expires_after(std::chrono::milliseconds(50));
    return backoff_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && self->acceptor_.is_open()) self->accept();
    });
  }
  // A few bytes into an empty send buffer: written whole, without waiting, or not at all.
  std::string reply = agent_reply(state_.pool.load(), state_.stopping.load());
  socket.non_blocking(true, ec);
  if (!ec) socket.write_some(boost::asio::buffer(reply), ec);
  socket.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
  socket.close(ec);
  accept();
}

}  // namespace kcoral
