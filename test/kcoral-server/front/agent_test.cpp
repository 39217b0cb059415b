// The agent check (kcoral-server/front/agent.cpp): the weight is 100% while a worker is
// free, falls with what the server holds beyond its workers, never reaches 0 while serving,
// and is 0% while stopping; programs count by their GPUs; the reply is one line HAProxy
// parses as a weight alone; the listener answers each connection with that line and
// closes it.
#include <doctest/doctest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <thread>

#include "agent.hpp"
#include "server_fixture.hpp"

TEST_SUITE("agent") {

TEST_CASE("a server with a free worker gets its whole weight") {
  CHECK(kcoral::agent_weight_percent({1, 0, 0, 0, 0}) == 100);
  CHECK(kcoral::agent_weight_percent({8, 0, 0, 0, 0}) == 100);
  CHECK(kcoral::agent_weight_percent({8, 7, 0, 7, 0}) == 100);
}

TEST_CASE("the weight is the share of a worker a new program would get") {
  CHECK(kcoral::agent_weight_percent({1, 1, 0, 1, 0}) == 50);
  CHECK(kcoral::agent_weight_percent({1, 1, 1, 1, 1}) == 33);
  CHECK(kcoral::agent_weight_percent({1, 1, 3, 1, 3}) == 20);
  CHECK(kcoral::agent_weight_percent({8, 8, 0, 8, 0}) == 88);
  CHECK(kcoral::agent_weight_percent({8, 8, 8, 8, 8}) == 47);
  // More waiting never raises it.
  unsigned previous = 100;
  for (std::size_t waiting = 0; waiting < 1000; waiting += 7) {
    unsigned now = kcoral::agent_weight_percent({4, 4, waiting, 4, waiting});
    CHECK(now <= previous);
    previous = now;
  }
}

TEST_CASE("programs count by the GPUs they hold, not by their number") {
  // Eight GPUs, one worker each: one program of all eight weighs as eight of one GPU.
  CHECK(kcoral::agent_weight_percent({8, 1, 0, 8, 0}) == 88);
  CHECK(kcoral::agent_weight_percent({8, 8, 0, 8, 0}) == 88);
  // One program of two GPUs running, one of four waiting: as six programs.
  CHECK(kcoral::agent_weight_percent({4, 1, 1, 2, 4}) == 57);
  CHECK(kcoral::agent_weight_percent({4, 1, 1, 1, 1}) == 100);
}

TEST_CASE("a serving server never reports 0, however loaded, nor more than 100") {
  CHECK(kcoral::agent_weight_percent({1, 1, 100000, 1, 100000}) == 1);
  CHECK(kcoral::agent_weight_percent({0, 0, 0, 0, 0}) == 1);
  CHECK(kcoral::agent_weight_percent({4096, 0, 0, 0, 0}) == 100);
}

TEST_CASE("the reply is one weight word and a newline; 0% while stopping") {
  CHECK(kcoral::agent_reply({2, 1, 0, 1, 0}, false) == "100%\n");
  CHECK(kcoral::agent_reply({2, 2, 2, 2, 2}, false) == "40%\n");
  CHECK(kcoral::agent_reply({2, 0, 0, 0, 0}, true) == "0%\n");
}

TEST_CASE("each connection is answered with the reply and closed") {
  kcoral::test::ServerFixture server;  // an unstarted pool: one worker, none running
  auto agent = std::make_shared<kcoral::Agent>(server.io, server.state);
  auto port = agent->open({boost::asio::ip::make_address("127.0.0.1"), 0});
  REQUIRE(port);
  agent->run();
  std::thread io([&] { server.io.run(); });

  auto ask = [&] {
    boost::asio::io_context client_io;
    boost::asio::ip::tcp::socket socket(client_io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), *port});
    std::string reply;
    boost::system::error_code ec;
    boost::asio::read(socket, boost::asio::dynamic_buffer(reply), ec);  // to the end
    CHECK(ec == boost::asio::error::eof);
    return reply;
  };
  CHECK(ask() == "100%\n");
  server.state.stopping = true;
  CHECK(ask() == "0%\n");

  agent->stop();  // the pending accept ends, and with it the io thread's work
  io.join();
}

}  // TEST_SUITE
