// How a value lies in Redis. A value of `size` bytes is cut into parts of at most part_bytes,
// each a string key, plus a manifest naming them:
//   manifest  <prefix>{<tag>}                    (kManifestBytes, below)
//   part i    <prefix>{<tag>}:<generation>:<i>   (generation: 16 hex digits)
// where <tag> is the user's key with '%' and '}' written as %25 and %7D (the empty key as
// "%"), so that every key of a value shares one non-empty hash tag, lives on one cluster
// node and can change in one MULTI/EXEC, whatever braces the user's key holds. A put writes
// its parts under a new random generation and swaps the manifest, so a reader never mixes
// two values' parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvc::plugin::redis {

// How long the parts of a replaced value stay (PEXPIRE), so that a get which read the old
// manifest just before the put still finds them: it asks for them at once, so this is ample.
constexpr uint64_t kOldPartsGraceMs = 10000;

// Manifest bytes (little-endian): "KVCR", u32 version, u64 value size, u64 part bytes,
// u64 part count, u64 generation, u64 XXH3-64 of the whole value.
constexpr size_t kManifestBytes = 48;
constexpr uint32_t kManifestVersion = 1;

struct Manifest {
  uint64_t size = 0;
  uint64_t part_bytes = 1;
  uint64_t parts = 0;
  uint64_t generation = 0;
  uint64_t checksum = 0;

  // Bytes of part i.
  size_t part_size(uint64_t i) const;
};

// parts = ceil(size / part_bytes).
Manifest make_manifest(uint64_t size, uint64_t part_bytes, uint64_t generation,
                       uint64_t checksum);
std::string encode(const Manifest& manifest);
// The manifest in `bytes`, or nullopt with the reason in `problem`.
std::optional<Manifest> decode(std::string_view bytes, std::string& problem);

std::string manifest_key(const std::string& prefix, std::string_view user_key);
std::string part_key(const std::string& manifest_key, uint64_t generation, uint64_t index);

}  // namespace kvc::plugin::redis
