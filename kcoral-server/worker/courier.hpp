// Courier: the one thread of a worker process that holds the channel to the front.
//
// Uploaded code runs in the worker's own process, so the channel must be somewhere that
// code cannot reach. The courier thread gives itself a descriptor table of its own
// (unshare(CLONE_FILES)) holding the channel, and the channel is then closed in the table
// that every other thread shares: no descriptor number a program can find, dup, poll or
// pass on refers to it. The executor sends and receives through the courier in memory.
// Descriptors cross between the two tables by being reopened through /proc: the courier's
// blob memfds for the program, the program's result memfd for the front. A socket cannot
// be reopened that way, so the channel stays out of reach. (A program that corrupts this
// process's memory could still make the courier send for it; the front's state machine
// is what holds then, and it confines that to the program's own job.)
//
// Thread-safe: send() from any thread (the CUPTI callback's too), receive() from one.
//
//   auto courier = Courier::start(std::move(channel));   // the channel is out of reach now
//   (*courier)->send(messages::Ready{});
//   auto next = (*courier)->receive();                    // blocks
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "messages.hpp"

namespace kcoral {

class Courier {
 public:
  // Starts the thread and moves `channel` (a descriptor of the shared table, closed there
  // once this returns) into the thread's own table.
  [[nodiscard]] static Result<std::unique_ptr<Courier>> start(UniqueFd channel);
  Courier(const Courier&) = delete;
  Courier& operator=(const Courier&) = delete;
  ~Courier();

  // Sends a message with `fds` (descriptors of the shared table; they stay the caller's)
  // and returns once it is sent or has failed.
  [[nodiscard]] Status send(const messages::Message& message, std::vector<int> fds = {});
  // The next message from the front, its descriptors reopened in the shared table; an
  // error once the front has closed the channel.
  [[nodiscard]] Result<messages::Received> receive();

 private:
  struct Outgoing {
    const messages::Message* message;
    std::vector<int> fds;
    std::optional<Status> status;
  };
  struct Incoming {
    std::optional<messages::Message> message;  // none: the channel failed (see `error`)
    std::vector<int> fds;                  // numbers in the courier's table
    Error error;
  };

  Courier() = default;
  void loop(UniqueFd channel);
  void wake();
  void send_waiting(const Channel& channel);
  bool receive_waiting(const Channel& channel);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Outgoing*> outgoing_;
  std::deque<Incoming> incoming_;
  std::vector<int> to_close_;  // courier-table descriptors the receiver has reopened
  bool ready_ = false;
  bool stopping_ = false;
  Status started_;
  pid_t tid_ = 0;       // the courier thread, for /proc/<pid>/task/<tid>/fd
  UniqueFd wake_;       // eventfd: outgoing messages wait, or stop
  std::thread thread_;
};

}  // namespace kcoral
