#include "slot_map.hpp"

#include "settings.hpp"

namespace kvc::plugin::redis {

uint16_t crc16_xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (char c : bytes) {
    crc ^= static_cast<uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000u) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021u)
                                 : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

int key_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16_xmodem(key) & (kSlots - 1);
}

bool SlotMap::load(const redisReply& reply, const std::string& asked, std::string& problem) {
  std::string asked_host;
  int asked_port = 0;
  split_address(asked, asked_host, asked_port);
  if (reply.type != REDIS_REPLY_ARRAY) {
    problem = "CLUSTER SLOTS did not return an array";
    return false;
  }
  SlotMap loaded;
  for (size_t r = 0; r < reply.elements; ++r) {
    const redisReply* range = reply.element[r];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER ||
        range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2 ||
        range->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        range->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      problem = "CLUSTER SLOTS returned a malformed slot range";
      return false;
    }
    const long long first = range->element[0]->integer;
    const long long last = range->element[1]->integer;
    if (first < 0 || last >= kSlots || first > last) {
      problem = "CLUSTER SLOTS returned a slot out of range";
      return false;
    }
    std::string host(text_of(*range->element[2]->element[0]));
    // An empty or "?" host: the same host we asked (Redis 7's unknown endpoint).
    if (host.empty() || host == "?") host = asked_host;
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    const auto port = static_cast<uint64_t>(range->element[2]->element[1]->integer);
    const uint16_t node = loaded.index_of(host + ":" + decimal(port));
    for (long long slot = first; slot <= last; ++slot) loaded.owner_[slot] = node;
  }
  *this = std::move(loaded);
  return true;
}

void SlotMap::set(int slot, const std::string& address) { owner_[slot] = index_of(address); }

uint16_t SlotMap::index_of(const std::string& address) {
  for (size_t i = 1; i < nodes_.size(); ++i) {
    if (nodes_[i] == address) return static_cast<uint16_t>(i);
  }
  nodes_.push_back(address);
  return static_cast<uint16_t>(nodes_.size() - 1);
}

}  // namespace kvc::plugin::redis
