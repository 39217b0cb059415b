// Agent: the server's load as a balancer's weight, through HAProxy's agent check.
//
// With --agent-port, the server listens on a second TCP port. Every connection there is
// answered with one line and closed at once: the weight, in percent of the weight the
// balancer was configured with, that this server should have now ("75%\n"), or "0%\n"
// while it shuts down (a weight of 0 takes it out of the rotation, as a drain does, and
// the next server on that port undoes it with its first answer). The agent never sends
// HAProxy's state words: "drain" and "maint" are administrative states that only "ready"
// lifts, and "ready" would also lift a drain an operator set by hand; "up" and "down" would
// second-guess the HTTP health check on /health, which already reports a stopping server.
// Nothing is read from the connection and no state is kept per connection, so no client
// can hold the agent's resources: the answer fits any socket's send buffer at once.
//
//   auto agent = std::make_shared<Agent>(io, state);
//   auto port = agent->open(endpoint);   // then agent->run(); agent->stop() to close
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>

#include "router.hpp"

namespace kcoral {

// The weight a server with this load should have, in percent (1 to 100) of its
// configured weight: the share of one worker that a program sent now would get if the
// server divided its workers evenly among everything it holds, the new program included.
// Both sides are counted in GPUs, since a program of n GPUs holds n GPUs' workers' worth:
// capacity / (gpus_running + gpus_waiting + 1), at most 1 (on a CPU server, a program is
// one). An idle or partly busy server is 100; one worker running 1 program is 50, with one
// more waiting 33; a server of 8 GPUs, one worker each, running a program of all 8 is 88,
// as if it ran 8 programs of one GPU. Never 0 while serving:
// a farm whose servers are all busy must still take programs (they queue), and a sample
// one agent interval old should shift traffic, not stampede it onto one server.
[[nodiscard]] unsigned agent_weight_percent(const WorkerPool::Load& load);

// The agent's whole answer: "<weight>%\n", "0%\n" when stopping.
[[nodiscard]] std::string agent_reply(const WorkerPool::Load& load, bool stopping);

// Thread-safety: open() before run(); stop() from any thread. Owned through shared_ptr by
// its pending accept; reads the pool's load and `stopping` from the state it is given.
class Agent : public std::enable_shared_from_this<Agent> {
 public:
  Agent(boost::asio::io_context& io, const ServerState& state);
  // Binds and listens; returns the port actually bound (for port 0).
  [[nodiscard]] Result<std::uint16_t> open(const boost::asio::ip::tcp::endpoint& endpoint);
  void run();
  void stop();

 private:
  void accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  const ServerState& state_;
};

}  // namespace kcoral
