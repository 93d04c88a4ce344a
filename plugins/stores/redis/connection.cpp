#include "connection.hpp"

#include <poll.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/store_support.hpp"

namespace kvc::plugin::redis {
namespace {

timeval to_timeval(int ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

}  // namespace

Connection::Connection(const std::string& address, const Settings& settings)
    : address_(address), settings_(settings) {
  const timeval timeout = to_timeval(settings.timeout_ms);
  if (settings.unix_socket) {
    context_.reset(redisConnectUnixWithTimeout(address.c_str(), timeout));
  } else {
    std::string host;
    int port = 0;
    split_address(address, host, port);
    context_.reset(redisConnectWithTimeout(host.c_str(), port, timeout));
  }
  if (context_ == nullptr) throw std::bad_alloc();
  if (context_->err != 0) {
    throw Error(KVC_ERR_IO, address_ + ": cannot connect: " + context_->errstr);
  }
  if (redisSetTimeout(context_.get(), timeout) != REDIS_OK) fail_io("cannot set the timeout");
  if (settings.password) {
    Reply reply = settings.username ? call({"AUTH", *settings.username, *settings.password})
                                    : call({"AUTH", *settings.password});
    if (is_error(*reply)) {
      // Not only WRONGPASS: a server without a password refuses AUTH too ("ERR AUTH <password>
      // called without any password configured").
      throw Error(KVC_ERR_CONFIG, "authentication failed for user " +
                                            quoted(settings.user()) + " at " + address_ + ": " +
                                            printable(text_of(*reply), 200));
    }
  }
  if (settings.db != 0) {
    const std::string db = decimal(settings.db);
    Reply reply = call({"SELECT", db});
    if (is_error(*reply)) {
      if (std::string_view(reply->str, reply->len).substr(0, 6) == "NOAUTH") {
        fail_on_error(text_of(*reply), address_, settings.user(), "SELECT " + db);
      }
      throw Error(KVC_ERR_CONFIG, "params.db: " + address_ + " refused SELECT " + db +
                                            ": " + printable(text_of(*reply), 200));
    }
  }
}

bool Connection::alive_when_idle() const {
  pollfd p{context_->fd, POLLIN, 0};
  // An idle connection has nothing to read: readable means end of file or an error.
  return poll(&p, 1, 0) == 0;
}

void Connection::send(CommandBatch& batch) {
  const int error = batch.write_to(context_->fd);
  if (error == 0) return;
  if (error == EAGAIN || error == EWOULDBLOCK) {
    fail_io("timed out after " + decimal(static_cast<uint64_t>(settings_.timeout_ms)) +
            " ms sending");
  }
  fail_io(std::strerror(error));
}

Reply Connection::receive() {
  void* raw = nullptr;
  errno = 0;
  if (redisGetReply(context_.get(), &raw) != REDIS_OK || raw == nullptr) {
    if (context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      fail_receive(errno);
    }
    if (context_->err == REDIS_ERR_OOM) {
      broken_ = true;
      throw std::bad_alloc();
    }
    if (context_->err == REDIS_ERR_EOF) fail_receive(0);
    fail_io(context_->errstr[0] != '\0' ? context_->errstr : "no reply");
  }
  return Reply(static_cast<redisReply*>(raw));
}

Reply Connection::call(std::initializer_list<std::string_view> args) {
  CommandBatch batch;
  batch.add(args);
  send(batch);
  return receive();
}

void Connection::fail_receive(int error) {
  if (error == 0) fail_io("the server closed the connection");
  if (error == EAGAIN || error == EWOULDBLOCK) {
    fail_io("timed out after " + decimal(static_cast<uint64_t>(settings_.timeout_ms)) +
            " ms waiting for a reply");
  }
  fail_io(std::strerror(error));
}

void Connection::fail_io(const std::string& what) {
  broken_ = true;
  throw Error(KVC_ERR_IO, address_ + ": " + what);
}

}  // namespace kvc::plugin::redis
