// Redis Cluster routing: which node serves each of the 16384 hash slots, as CLUSTER SLOTS
// reports it, and the slot of a key (CRC16/XMODEM of its hash tag, as the cluster spec says).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reply.hpp"

namespace kvc::plugin::redis {

constexpr int kSlots = 16384;

// CRC16/XMODEM (poly 0x1021, init 0), the checksum of Redis Cluster's key slots.
uint16_t crc16_xmodem(std::string_view bytes);
// The slot of `key`: of the text between its first '{' and the next '}' when that is
// non-empty, else of the whole key.
int key_slot(std::string_view key);

class SlotMap {
 public:
  // The map from a CLUSTER SLOTS reply given by the node at `asked` (a master's empty host
  // means `asked`'s host). False, with the reason in `problem`, when the reply is not one.
  bool load(const redisReply& reply, const std::string& asked, std::string& problem);
  // The master of `slot` ("" when no node serves it).
  const std::string& node(int slot) const { return nodes_[owner_[slot]]; }
  void set(int slot, const std::string& address);
  const std::vector<std::string>& nodes() const { return nodes_; }

 private:
  uint16_t index_of(const std::string& address);

  std::vector<std::string> nodes_{""};    // nodes_[0]: no node
  std::array<uint16_t, kSlots> owner_{};  // indices into nodes_
};

}  // namespace kvc::plugin::redis
