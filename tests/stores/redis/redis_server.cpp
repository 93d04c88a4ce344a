#include "redis_server.hpp"

#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace kvc::store_tests {
namespace {

// Binds a loopback port (0: any) and returns it, or 0 when it is taken.
int bind_port(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof address;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  return bound ? ntohs(address.sin_port) : 0;
}

// A loopback port nothing was bound to a moment ago; for a cluster node, one whose bus port
// (10000 above) is free too.
int free_port(bool cluster) {
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = bind_port(0);
    if (port == 0) break;
    if (!cluster || (port + 10000 <= 65535 && bind_port(port + 10000) != 0)) return port;
  }
  throw std::runtime_error("cannot find a free loopback port");
}

bool answers_ping(int port) {
  const timeval timeout{0, 200000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeout);
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    redisSetTimeout(c, timeout);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
    // NOAUTH: up, with a password.
    ok = reply != nullptr && (reply->type == REDIS_REPLY_STATUS ||
                              (reply->type == REDIS_REPLY_ERROR &&
                               std::string(reply->str, reply->len).rfind("NOAUTH", 0) == 0));
    if (reply != nullptr) freeReplyObject(reply);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace

std::string redis_server_binary() {
  if (const char* given = std::getenv("KVC_TEST_REDIS_SERVER"); given != nullptr && *given) {
    return given;
  }
  const char* path = std::getenv("PATH");
  std::string folders = path != nullptr ? path : "";
  size_t begin = 0;
  while (begin <= folders.size()) {
    const size_t end = std::min(folders.find(':', begin), folders.size());
    const std::string candidate = folders.substr(begin, end - begin) + "/redis-server";
    if (end > begin && access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

RedisServer::RedisServer(std::vector<std::string> options) : options_(std::move(options)) {
  std::string base = std::filesystem::temp_directory_path() / "kvc-redis-fault-XXXXXX";
  if (mkdtemp(base.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  folder_ = base;
  // Another process may take the port between free_port() and the server's bind: try again.
  for (int attempt = 0; attempt < 5 && pid_ < 0; ++attempt) {
    port_ = free_port(std::find(options_.begin(), options_.end(), "--cluster-enabled") !=
                      options_.end());
    launch();
    try {
      wait_until_ready();
    } catch (const std::runtime_error&) {
      kill();
    }
  }
  if (pid_ < 0) {
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
    throw std::runtime_error("redis-server did not start (" + redis_server_binary() + ")");
  }
}

RedisServer::~RedisServer() {
  kill();
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

void RedisServer::launch() {
  const std::string binary = redis_server_binary();
  std::vector<std::string> args{binary,      "--port",       std::to_string(port_),
                                "--bind",    "127.0.0.1",    "--save",
                                "",          "--appendonly", "no",
                                "--dir",     folder_,        "--logfile",
                                folder_ + "/server.log"};
  args.insert(args.end(), options_.begin(), options_.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
}

void RedisServer::wait_until_ready() {
  for (int tries = 0; tries < 200; ++tries) {
    if (answers_ping(port_)) return;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("redis-server did not answer PING");
}

void RedisServer::pause() { ::kill(pid_, SIGSTOP); }

void RedisServer::resume() { ::kill(pid_, SIGCONT); }

void RedisServer::kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::restart() {
  kill();
  launch();
  wait_until_ready();
}

}  // namespace kvc::store_tests
