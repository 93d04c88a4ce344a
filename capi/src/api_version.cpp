#include "kvcache/kvcache.h"

#define KVC_STRINGIFY_(x) #x
#define KVC_STRINGIFY(x) KVC_STRINGIFY_(x)

extern "C" {

uint32_t kvc_version(void) { return KVC_VERSION_NUMBER; }

const char* kvc_version_string(void) {
  return KVC_STRINGIFY(KVC_VERSION_MAJOR) "." KVC_STRINGIFY(KVC_VERSION_MINOR) "." KVC_STRINGIFY(
      KVC_VERSION_PATCH);
}

}  // extern "C"
