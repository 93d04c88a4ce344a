// The redis store's parameters (docs/stores.md), read and checked once at create.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/store_support.hpp"

namespace kvc::plugin::redis {

struct Settings {
  // One node: "host:port" or a unix socket path; Redis Cluster: the seed nodes.
  std::vector<std::string> nodes;
  bool cluster = false;
  bool unix_socket = false;
  std::optional<std::string> username;  // AUTH <username> <password> when set
  std::optional<std::string> password;  // read from the environment variable password_env
  uint32_t db = 0;
  int timeout_ms = 5000;
  size_t part_bytes = size_t{4} << 20;
  std::string key_prefix = "kvc:";
  size_t pool = 4;  // connections per node
  // WAIT after each write for this many replicas to acknowledge it, at most wait_timeout_ms
  // (then less than timeout_ms); 0: no WAIT.
  int wait_replicas = 0;
  int wait_timeout_ms = 1000;

  // The user AUTH names, for messages.
  std::string user() const { return username.value_or("default"); }
};

Settings read_settings(const StoreParams& params);

// "host:port" -> {host, port}; false when it is not of that form.
bool split_address(const std::string& address, std::string& host, int& port);

}  // namespace kvc::plugin::redis
