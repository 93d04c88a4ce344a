#include "value_layout.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace kvc::plugin::redis {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'C', 'R'};

void put_u64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFFu);
}

uint64_t get_u64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

}  // namespace

size_t Manifest::part_size(uint64_t i) const {
  const uint64_t begin = i * part_bytes;
  return static_cast<size_t>(size - begin < part_bytes ? size - begin : part_bytes);
}

Manifest make_manifest(uint64_t size, uint64_t part_bytes, uint64_t generation,
                       uint64_t checksum) {
  Manifest m;
  m.size = size;
  m.part_bytes = part_bytes;
  m.parts = size / part_bytes + (size % part_bytes != 0 ? 1 : 0);
  m.generation = generation;
  m.checksum = checksum;
  return m;
}

std::string encode(const Manifest& m) {
  std::string out(kManifestBytes, '\0');
  std::memcpy(&out[0], kMagic, 4);
  for (int i = 0; i < 4; ++i) out[4 + i] = static_cast<char>((kManifestVersion >> (8 * i)) & 0xFFu);
  put_u64(&out[8], m.size);
  put_u64(&out[16], m.part_bytes);
  put_u64(&out[24], m.parts);
  put_u64(&out[32], m.generation);
  put_u64(&out[40], m.checksum);
  return out;
}

std::optional<Manifest> decode(std::string_view bytes, std::string& problem) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    problem = "is not a redis store manifest";
    return std::nullopt;
  }
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) {
    version |= uint32_t{static_cast<unsigned char>(bytes[4 + i])} << (8 * i);
  }
  if (version != kManifestVersion) {
    char text[96];
    std::snprintf(text, sizeof text, "has version %" PRIu32 ", this plugin reads version %" PRIu32,
                  version, kManifestVersion);
    problem = text;
    return std::nullopt;
  }
  if (bytes.size() != kManifestBytes) {
    problem = "has the wrong length";
    return std::nullopt;
  }
  const char* p = bytes.data();
  const uint64_t part_bytes = get_u64(p + 16);
  const Manifest m = make_manifest(get_u64(p + 8), part_bytes == 0 ? 1 : part_bytes,
                                   get_u64(p + 32), get_u64(p + 40));
  if (part_bytes == 0 || get_u64(p + 24) != m.parts || m.size > SIZE_MAX) {
    problem = "is inconsistent (size, part size and part count disagree)";
    return std::nullopt;
  }
  return m;
}

std::string manifest_key(const std::string& prefix, std::string_view user_key) {
  std::string key = prefix;
  key.reserve(prefix.size() + user_key.size() + 3);
  key += '{';
  if (user_key.empty()) key += '%';
  for (char c : user_key) {
    if (c == '%') {
      key += "%25";
    } else if (c == '}') {
      key += "%7D";
    } else {
      key += c;
    }
  }
  key += '}';
  return key;
}

std::string part_key(const std::string& manifest_key, uint64_t generation, uint64_t index) {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, ":%016" PRIx64 ":%" PRIu64, generation, index);
  return manifest_key + suffix;
}

}  // namespace kvc::plugin::redis
