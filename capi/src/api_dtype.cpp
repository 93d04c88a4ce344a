#include "handles.hpp"
#include "kvcache/kvcache_format.h"

extern "C" {

// A C caller may pass any int: the table's functions take it as read (raw_enum).

size_t kvc_dtype_size(kvc_dtype dtype) {
  const int32_t format = kvc::raw_enum(dtype);
  return kvc_format_group_size(format) == 1 ? kvc_format_row_bytes(format, 1) : 0;
}

const char* kvc_dtype_name(kvc_dtype dtype) { return kvc_format_name(kvc::raw_enum(dtype)); }

kvc_status* kvc_format_describe(kvc_dtype format, kvc_format_info* out_info) {
  return kvc::guarded([&] {
    const int32_t raw = kvc::raw_enum(format);
    kvc::require(kvc_format_is_valid(raw), "format is not a kvc_dtype of the format table");
    kvc_format_info info{};
    info.struct_size = sizeof(info);
    info.format = format;
    info.name = kvc_format_name(raw);
    info.group_size = kvc_format_group_size(raw);
    info.group_bytes = kvc_format_group_bytes(raw);
    kvc::write_versioned(out_info, info, "out_info");
  });
}

}  // extern "C"
