#include "handles.hpp"

namespace kvc {

kvc_status* make_status(kvc_status_code code, const std::string& message) noexcept {
  try {
    return new kvc_status{code, message};
  } catch (...) {
    // Out of memory while reporting an error: a static status cannot be freed, so report
    // what is most likely true with a fresh minimal allocation, or give up with NULL.
    return new (std::nothrow) kvc_status{KVC_ERR_OUT_OF_MEMORY, std::string()};
  }
}

}  // namespace kvc

extern "C" {

kvc_status_code kvc_status_get_code(const kvc_status* status) {
  return status ? status->code : KVC_OK;
}

const char* kvc_status_message(const kvc_status* status) {
  return status ? status->message.c_str() : "";
}

void kvc_status_free(kvc_status* status) { delete status; }

const char* kvc_status_code_name(kvc_status_code code) {
  if (!kvc::enum_in(code, KVC_OK, KVC_ERR_IO)) return "UNKNOWN";
  switch (code) {
    case KVC_OK: return "OK";
    case KVC_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case KVC_ERR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case KVC_ERR_NOT_FOUND: return "NOT_FOUND";
    case KVC_ERR_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case KVC_ERR_CONFIG: return "CONFIG";
    case KVC_ERR_PLUGIN: return "PLUGIN";
    case KVC_ERR_UNSUPPORTED: return "UNSUPPORTED";
    case KVC_ERR_NO_DEVICE: return "NO_DEVICE";
    case KVC_ERR_INTERNAL: return "INTERNAL";
    case KVC_ERR_IO: return "IO";
  }
  return "UNKNOWN";
}

}  // extern "C"
