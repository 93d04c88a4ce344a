// Export and import of one sequence: to and from a caller's buffer, and files.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "files.hpp"
#include "handles.hpp"
#include "quote.hpp"
#include "sequence_image.hpp"

namespace {

kvc::Error io_error(const std::string& what, const std::string& path) {
  const int error = errno;
  return kvc::Error(KVC_ERR_IO, what + " " + kvc::quote(path) + ": " + std::strerror(error));
}

}  // namespace

extern "C" {

kvc_status* kvc_seq_export_size(kvc_cache* cache, int32_t seq_id, size_t* out_size) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_size != nullptr, "out_size is NULL");
    *out_size = cache->impl->export_size(seq_id);
  });
}

kvc_status* kvc_seq_export(kvc_cache* cache, int32_t seq_id, void* buffer, size_t capacity,
                           size_t* out_written) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_written != nullptr, "out_written is NULL");
    kvc::require(buffer != nullptr || capacity == 0, "buffer is NULL");
    const size_t size = cache->impl->export_size(seq_id);
    if (capacity < size) {
      throw kvc::Error(KVC_ERR_INVALID_ARGUMENT, "export: the buffer holds " +
                                                     std::to_string(capacity) + " bytes, " +
                                                     std::to_string(size) + " are needed");
    }
    *out_written = cache->impl->export_to(seq_id, static_cast<uint8_t*>(buffer), capacity);
  });
}

kvc_status* kvc_seq_import(kvc_cache* cache, int32_t seq_id, const void* data, size_t size) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(data != nullptr || size == 0, "data is NULL");
    cache->impl->import_sequence(
        seq_id, kvc::decode(static_cast<const uint8_t*>(data), size, kvc::DecodedRows::in_place));
  });
}

kvc_status* kvc_seq_export_file(kvc_cache* cache, int32_t seq_id, const char* path) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(path != nullptr && *path != '\0', "path is NULL or empty");
    const kvc::support::LargeBytes bytes = cache->impl->export_bytes(seq_id);
    const std::string target(path);
    kvc::require_not_folder(target, "export:");
    const std::string temporary = target + ".tmp";
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      if (!out) throw io_error("export: cannot create", temporary);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      out.flush();
      if (!out) {
        std::remove(temporary.c_str());
        throw io_error("export: cannot write", temporary);
      }
    }
    if (std::rename(temporary.c_str(), target.c_str()) != 0) {
      const kvc::Error error = io_error("export: cannot replace", target);
      std::remove(temporary.c_str());
      throw error;
    }
  });
}

kvc_status* kvc_seq_import_file(kvc_cache* cache, int32_t seq_id, const char* path) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(path != nullptr && *path != '\0', "path is NULL or empty");
    const std::string bytes = kvc::read_file(path, "import:");
    cache->impl->import_sequence(
        seq_id, kvc::decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                            kvc::DecodedRows::in_place));
  });
}

}  // extern "C"
