// The layout of a value's file: a fixed header, the key, then the value.
//
//   offset  size  field
//        0     8  magic "KVCSTORE"
//        8     4  format version (1), little-endian like every field
//       12     4  key length in bytes
//       16     8  value size in bytes
//       24     8  XXH3-64 of the value
//       32     -  the key, then the value
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvc::plugin {

constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 32;

struct FileHeader {
  uint32_t version = kFormatVersion;
  uint32_t key_bytes = 0;
  uint64_t value_bytes = 0;
  uint64_t checksum = 0;
};

void encode_header(const FileHeader& header, unsigned char (&out)[kHeaderBytes]);

// The header in the kHeaderBytes at `bytes`, or a Error(KVC_ERR_IO) "<file>: <what is
// wrong>" for a bad magic, an unknown version or a key longer than the ABI allows.
FileHeader decode_header(const unsigned char* bytes, const std::string& file);

}  // namespace kvc::plugin
