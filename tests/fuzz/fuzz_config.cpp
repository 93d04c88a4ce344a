// The input as YAML configuration text: a cache from kvc_cache_create_from_yaml (on the
// shared context) and a context from kvc_context_create; whatever succeeds is used a little
// and destroyed.
#include <string>

#include "fuzz_support.hpp"

namespace {

// A context loads every plugin its plugins.paths name: only texts that can name nothing but
// files of the working folder (no '/', no escapes) go to kvc_context_create, so that the
// fuzzer cannot make it dlopen system libraries. The YAML reader sees every text through
// kvc_cache_create_from_yaml.
bool safe_for_context(const std::string& text) {
  return text.find_first_of("/\\") == std::string::npos;
}

void use(kvc_cache* cache) {
  kvc_cache_params params;
  kvc_cache_params_init(&params);
  kvf::require_ok(kvc_cache_get_params(cache, &params), "kvc_cache_get_params");
  const kvc_cache_stats before = kvf::stats_of(cache);
  kvf::check(before.bytes_used == 0 && before.sequences == 0, "a new cache holds something");
  size_t peak = 0;
  kvf::ok(kvc_cache_estimate_peak_bytes(cache, 1000, 100, 100, &peak));
  if (kvf::ok(kvc_seq_create(cache, 0))) {
    kvf::require_ok(kvc_seq_remove(cache, 0), "kvc_seq_remove");
    kvf::check(kvf::stats_of(cache).bytes_used == 0, "bytes_used after removing the sequence");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // As a C caller passes it: an embedded NUL ends the text.
  const std::string text(reinterpret_cast<const char*>(data), size);
  kvc_cache* cache = nullptr;
  if (kvf::ok(kvc_cache_create_from_yaml(kvf::shared_context(), text.c_str(), &cache))) {
    kvf::check(cache != nullptr, "kvc_cache_create_from_yaml succeeded without a cache");
    use(cache);
    kvc_cache_destroy(cache);
  }
  if (safe_for_context(text)) {
    kvc_context* context = nullptr;
    if (kvf::ok(kvc_context_create(text.c_str(), &context))) {
      kvf::check(context != nullptr, "kvc_context_create succeeded without a context");
      kvc_context_destroy(context);
    }
  }
  return 0;
}
