#include "file_names.hpp"

#include <xxhash.h>

#include <cstdio>

namespace kvc::plugin {
namespace {

bool kept_as_is(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

}  // namespace

std::string file_name_for_key(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string encoded = "v-";
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (kept_as_is(byte)) {
      encoded += c;
    } else {
      encoded += '%';
      encoded += kHex[byte >> 4];
      encoded += kHex[byte & 0xF];
    }
  }
  if (encoded.size() - 2 <= kMaxEncodedName) return encoded;
  const XXH128_hash_t hash = XXH3_128bits(key.data(), key.size());
  char name[40];
  std::snprintf(name, sizeof name, "h-%016llx%016llx",
                static_cast<unsigned long long>(hash.high64),
                static_cast<unsigned long long>(hash.low64));
  return name;
}

}  // namespace kvc::plugin
