// A redis-server process of a test's own, on a free loopback port, killed (SIGKILL, then
// reaped) when the object goes, whatever the test did: fault tests stop, kill and restart it.
// The binary is $KVC_TEST_REDIS_SERVER, else redis-server on PATH (redis_server_binary()).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvc::store_tests {

// The redis-server to run, or "" when there is none.
std::string redis_server_binary();

class RedisServer {
 public:
  // Starts the server with `options` ("--requirepass", "x", ...) beside the tests' own
  // (loopback, no persistence, its folder a new temporary one); throws std::runtime_error when
  // it does not answer PING.
  explicit RedisServer(std::vector<std::string> options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  // Its working folder (--dir): where a relative --unixsocket lies.
  const std::string& folder() const { return folder_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void pause();    // SIGSTOP: connections are accepted by the kernel, nothing is answered
  void resume();   // SIGCONT after pause()
  void kill();     // SIGKILL, reaped
  void restart();  // a new process on the same port and options (after kill())

 private:
  void launch();
  void wait_until_ready();

  std::vector<std::string> options_;
  std::string folder_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvc::store_tests
