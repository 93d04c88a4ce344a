#include "settings.hpp"

#include <cstdlib>

namespace kvc::plugin::redis {
namespace {

// Redis refuses larger bulk strings by default (proto-max-bulk-len).
constexpr size_t kMaxPartBytes = size_t{512} << 20;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = text.find(',', begin);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    std::string item = text.substr(begin, end - begin);
    const size_t first = item.find_first_not_of(' ');
    const size_t last = item.find_last_not_of(' ');
    items.push_back(first == std::string::npos ? "" : item.substr(first, last - first + 1));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return items;
}

}  // namespace

bool split_address(const std::string& address, std::string& host, int& port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string digits = address.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 5) {
    return false;
  }
  port = std::atoi(digits.c_str());
  if (port < 1 || port > 65535) return false;
  host = address.substr(0, colon);
  // "[::1]:6379": the brackets are not part of the host.
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return true;
}

Settings read_settings(const StoreParams& params) {
  Settings s;
  const std::string* nodes = params.find("nodes");
  const std::string* unix_socket = params.find("unix_socket");
  if (nodes != nullptr) {
    for (const char* single_only : {"host", "port", "unix_socket", "db"}) {
      if (params.find(single_only) != nullptr) {
        StoreParams::config_error(single_only,
                                  "not with params.nodes (Redis Cluster: seeds only, db 0)");
      }
    }
    for (const std::string& node : split_list(*nodes)) {
      std::string host;
      int port = 0;
      if (!split_address(node, host, port)) {
        StoreParams::config_error("nodes", "expected host:port[,host:port...], got " +
                                               quoted(*nodes));
      }
      s.nodes.push_back(node);
    }
    s.cluster = true;
  } else if (unix_socket != nullptr) {
    for (const char* tcp_only : {"host", "port"}) {
      if (params.find(tcp_only) != nullptr) {
        StoreParams::config_error(tcp_only, "not with params.unix_socket");
      }
    }
    s.nodes.push_back(params.required_text("unix_socket", "a socket path"));
    s.unix_socket = true;
  } else {
    const std::string host = params.text("host", "127.0.0.1");
    if (host.empty()) StoreParams::config_error("host", "expected a host name or address");
    const uint64_t port = params.integer("port", 6379, 1, 65535);
    s.nodes.push_back((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                      decimal(port));
  }
  if (const std::string* username = params.find("username")) {
    if (username->empty()) StoreParams::config_error("username", "expected a user name");
    s.username = *username;
  }
  if (const std::string* variable = params.find("password_env")) {
    if (variable->empty()) {
      StoreParams::config_error("password_env", "expected the name of an environment variable");
    }
    const char* password = std::getenv(variable->c_str());
    if (password == nullptr) {
      StoreParams::config_error("password_env", "the environment variable " + quoted(*variable) +
                                                    " is not set");
    }
    s.password = password;
  } else if (s.username) {
    StoreParams::config_error("username", "needs params.password_env (AUTH takes a password)");
  }
  s.db = static_cast<uint32_t>(params.integer("db", 0, 0, INT32_MAX));
  s.timeout_ms = static_cast<int>(params.integer("timeout_ms", 5000, 1, 24 * 3600 * 1000));
  s.part_bytes = params.byte_size("part_bytes", s.part_bytes, 1, kMaxPartBytes);
  s.key_prefix = params.text("key_prefix", s.key_prefix);
  if (s.key_prefix.find_first_of("{}") != std::string::npos) {
    StoreParams::config_error("key_prefix",
                              "must not hold '{' or '}': each value's hash tag follows it, got " +
                                  quoted(s.key_prefix));
  }
  s.pool = params.integer("pool", 4, 1, 1024);
  s.wait_replicas = static_cast<int>(params.integer("wait_replicas", 0, 0, 64));
  s.wait_timeout_ms = static_cast<int>(
      params.integer("wait_timeout_ms", static_cast<uint64_t>(s.wait_timeout_ms), 1, INT32_MAX));
  if (s.wait_replicas > 0 && s.wait_timeout_ms >= s.timeout_ms) {
    StoreParams::config_error("wait_timeout_ms",
                              "must be less than params.timeout_ms (" +
                                  decimal(static_cast<uint64_t>(s.timeout_ms)) +
                                  "), which bounds the wait for WAIT's reply, got " +
                                  decimal(static_cast<uint64_t>(s.wait_timeout_ms)));
  }
  return s;
}

}  // namespace kvc::plugin::redis
