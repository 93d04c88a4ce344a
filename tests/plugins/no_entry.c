/* A shared library that looks like a plugin but does not export kvc_plugin_entry. */
#include <stdint.h>

__attribute__((visibility("default"))) int32_t kvc_plugin_entry_point_misspelled(void) {
  return 0;
}

__attribute__((visibility("default"))) int32_t not_a_plugin(int32_t x) { return x + 1; }
