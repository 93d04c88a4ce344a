// One connection to one Redis node: hiredis connects, authenticates and reads replies;
// commands go out through CommandBatch. A connection that failed (reset, timeout, protocol
// error, or an exchange left half read) is broken: its pool discards it, and the next call
// connects again.
#pragma once

#include <hiredis.h>

#include <memory>
#include <string>

#include "command.hpp"
#include "reply.hpp"
#include "settings.hpp"

namespace kvc::plugin::redis {

class Connection {
 public:
  // Connects to `address` (host:port, or a socket path when settings.unix_socket), then AUTH
  // and SELECT as the settings say. Throws IO (unreachable, timeout) or CONFIG (refused
  // credentials, a db out of range).
  Connection(const std::string& address, const Settings& settings);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const std::string& address() const { return address_; }
  bool broken() const { return broken_; }
  void mark_broken() { broken_ = true; }
  // False when the server closed the connection while it was idle (the kernel saw its FIN or
  // RST), e.g. because it restarted.
  bool alive_when_idle() const;

  // Writes the batch; throws IO and breaks the connection on failure.
  void send(CommandBatch& batch);
  // The next reply; throws IO and breaks the connection on failure.
  Reply receive();

  // send() of one command, then receive().
  Reply call(std::initializer_list<std::string_view> args);

  // "<address>: <what went wrong>" for an IO error of this connection; breaks it.
  [[noreturn]] void fail_io(const std::string& what);
  // fail_io() for a failed read: `error` is errno, or 0 for the end of the stream.
  [[noreturn]] void fail_receive(int error);

  // For RawReader: the socket, and whether hiredis holds no bytes it has not parsed.
  int fd() const { return context_->fd; }
  bool reader_drained() const { return context_->reader->pos == context_->reader->len; }

 private:
  struct ContextDeleter {
    void operator()(redisContext* context) const noexcept { redisFree(context); }
  };

  std::string address_;
  const Settings& settings_;
  // Freed however the constructor ends.
  std::unique_ptr<redisContext, ContextDeleter> context_;
  bool broken_ = false;
};

// Breaks a connection unless finished(): a connection left with replies due, or with a WATCH
// on it, would hand them to its next caller.
class BrokenUnlessFinished {
 public:
  explicit BrokenUnlessFinished(Connection& connection) : connection_(connection) {}
  ~BrokenUnlessFinished() {
    if (!finished_) connection_.mark_broken();
  }
  BrokenUnlessFinished(const BrokenUnlessFinished&) = delete;
  BrokenUnlessFinished& operator=(const BrokenUnlessFinished&) = delete;
  void finished() { finished_ = true; }

 private:
  Connection& connection_;
  bool finished_ = false;
};

}  // namespace kvc::plugin::redis
