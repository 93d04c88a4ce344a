// The cpu backend called without the library: its vtable from its library, and a host API for
// it. For tests of what the backend does with calls the host never sends, or sends only in
// states hard to reach through the C API.
#pragma once

#include <doctest/doctest.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kvcache/kvcache_plugin.h"

namespace kvt {

// A host API whose parallel_for runs its chunks one after another, `grain` at a time, so a
// body starts mid-range as on the arena.
inline kvc_host_api direct_host() {
  kvc_host_api host{};
  host.struct_size = sizeof(host);
  host.abi_version = KVC_PLUGIN_ABI_VERSION;
  host.log = [](void*, kvc_log_level, const char*) {};
  host.parallel_for = [](void*, size_t n, size_t grain, kvc_range_fn body, void* user) {
    for (size_t begin = 0; begin < n; begin += grain) body(user, begin, std::min(n, begin + grain));
  };
  host.alloc = [](void*, size_t bytes, size_t alignment) {
    return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  };
  host.free = [](void*, void* ptr) { std::free(ptr); };
  return host;
}

// The cpu backend's vtable, from its library.
inline const kvc_backend_vtable* cpu_backend(const kvc_host_api& host) {
  void* library = dlopen(KVC_TEST_CPU_BACKEND_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(library != nullptr);
  auto entry = reinterpret_cast<kvc_plugin_entry_fn>(dlsym(library, KVC_PLUGIN_ENTRY_SYMBOL));
  const bool has_entry = entry != nullptr;
  REQUIRE(has_entry);
  const kvc_plugin_descriptor* descriptors = nullptr;
  size_t count = 0;
  kvc_plugin_error error{};
  REQUIRE(entry(&host, &descriptors, &count, &error) == KVC_OK);
  for (size_t i = 0; i < count; ++i) {
    const kvc_plugin_descriptor* d = KVC_PLUGIN_AT(const kvc_plugin_descriptor, descriptors, i);
    if (d->kind == KVC_PLUGIN_BACKEND && std::string(d->name) == "cpu")
      return static_cast<const kvc_backend_vtable*>(d->vtable);
  }
  FAIL("the cpu backend library has no cpu backend");
  return nullptr;
}

}  // namespace kvt
