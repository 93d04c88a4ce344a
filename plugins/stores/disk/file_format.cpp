#include "file_format.hpp"

#include <cstring>

#include "common/store_support.hpp"

namespace kvc::plugin {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', 'S', 'T', 'O', 'R', 'E'};

void put_le(unsigned char* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get_le(const unsigned char* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= uint64_t{in[i]} << (8 * i);
  return value;
}

[[noreturn]] void bad_file(const std::string& file, const std::string& problem) {
  throw Error(KVC_ERR_IO, file + ": " + problem);
}

}  // namespace

void encode_header(const FileHeader& header, unsigned char (&out)[kHeaderBytes]) {
  std::memcpy(out, kMagic, sizeof kMagic);
  put_le(out + 8, header.version, 4);
  put_le(out + 12, header.key_bytes, 4);
  put_le(out + 16, header.value_bytes, 8);
  put_le(out + 24, header.checksum, 8);
}

FileHeader decode_header(const unsigned char* bytes, const std::string& file) {
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0) {
    bad_file(file, "not a store file (bad magic)");
  }
  FileHeader header;
  header.version = static_cast<uint32_t>(get_le(bytes + 8, 4));
  if (header.version != kFormatVersion) {
    bad_file(file, "format version " + decimal(header.version) + ", this plugin reads " +
                       decimal(kFormatVersion));
  }
  header.key_bytes = static_cast<uint32_t>(get_le(bytes + 12, 4));
  if (header.key_bytes > kMaxKeyBytes) {
    bad_file(file, "bad header: a key of " + decimal(header.key_bytes) + " bytes");
  }
  header.value_bytes = get_le(bytes + 16, 8);
  header.checksum = get_le(bytes + 24, 8);
  return header;
}

}  // namespace kvc::plugin
