// Pipelined commands on one connection: add() queues, send() writes what is queued, receive()
// returns replies in order. In ASKING mode (a cluster's -ASK redirection) every command added
// with `keyed` is preceded by ASKING, whose reply receive() consumes. An exchange left with
// replies unread breaks its connection, so the next caller never reads them as its own.
#pragma once

#include <deque>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "command.hpp"
#include "connection.hpp"
#include "reply.hpp"

namespace kvc::plugin::redis {

class Exchange {
 public:
  Exchange(Connection& connection, bool asking) : connection_(connection), asking_(asking) {}
  ~Exchange() {
    if (!expected_.empty()) connection_.mark_broken();
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void add(std::initializer_list<std::string_view> args, bool keyed = true) {
    asking_first(keyed);
    batch_.add(args);
    expected_.push_back(false);
  }
  void add(const std::vector<std::string_view>& args, bool keyed = true) {
    asking_first(keyed);
    batch_.add(args);
    expected_.push_back(false);
  }
  void send() {
    if (!batch_.empty()) connection_.send(batch_);
  }
  // The next reply to a command added (and sent).
  Reply receive() {
    while (true) {
      const bool is_asking = expected_.front();
      Reply reply = connection_.receive();
      expected_.pop_front();
      if (!is_asking) return reply;
    }
  }

 private:
  void asking_first(bool keyed) {
    if (asking_ && keyed) {
      batch_.add({"ASKING"});
      expected_.push_back(true);
    }
  }

  Connection& connection_;
  bool asking_;
  CommandBatch batch_;
  std::deque<bool> expected_;  // per reply due: true for an ASKING's
};

}  // namespace kvc::plugin::redis
