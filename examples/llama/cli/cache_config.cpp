// kvc-llama --config (and compare --baseline-config): a kvcache context and a cache shaped
// for the model (see cli.h).
//
// Why the YAML is rewritten rather than read back from a probe cache: kvc_cache_get_params()
// returns the policy's name, budget and triggers but not its `params:` (window, kernel, ...),
// so a cache rebuilt from read-back params would silently lose them. Instead the file goes
// through the library's parser twice: once whole, for the context (plugins, threads, errors
// with file:line), and once as a `cache`/`backend`/`policy` document whose shape keys are the
// model's, for kvc_cache_create_from_yaml().
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cli.h"

namespace {

int fail(char* error, size_t error_size, const std::string& message) {
  if (error && error_size > 0) std::snprintf(error, error_size, "%s", message.c_str());
  return -1;
}

int fail_status(kvc_status* status, char* error, size_t error_size, const std::string& what) {
  std::string message = what + ": " + kvc_status_code_name(kvc_status_get_code(status)) + ": " +
                        kvc_status_message(status);
  kvc_status_free(status);
  return fail(error, error_size, message);
}

// The `cache`, `backend` and `policy` sections of `root` with the shape keys set to the
// model's; prints a note for each shape key the file set to something else.
std::string cache_document(const YAML::Node& root, const char* path,
                           const kvc_cache_params& shape) {
  YAML::Node cache(YAML::NodeType::Map);
  const YAML::Node given = root["cache"];
  if (given && given.IsMap()) {
    for (const auto& entry : given) cache[entry.first.as<std::string>()] = entry.second;
  }
  const struct {
    const char* key;
    int32_t value;
  } keys[] = {{"layers", shape.layers},
              {"kv_heads", shape.kv_heads},
              {"q_heads", shape.q_heads},
              {"head_dim", shape.head_dim}};
  for (const auto& k : keys) {
    const YAML::Node old = given && given.IsMap() ? given[k.key] : YAML::Node();
    if (old && old.IsScalar() && old.Scalar() != std::to_string(k.value)) {
      std::fprintf(stderr, "kvc-llama: note: %s: cache.%s: %s replaced by the model's %d\n", path,
                   k.key, old.Scalar().c_str(), static_cast<int>(k.value));
    }
    cache[k.key] = std::to_string(k.value);
  }
  if (!(given && given.IsMap() && given["dtype"])) cache["dtype"] = "f32";

  YAML::Node doc(YAML::NodeType::Map);
  doc["cache"] = cache;
  if (root["backend"]) doc["backend"] = root["backend"];
  if (root["policy"]) doc["policy"] = root["policy"];
  YAML::Emitter out;
  out << doc;
  return out.c_str();
}

}  // namespace

extern "C" int kvl_cli_create_cache(const kvl_model* model, const char* config_path,
                                    const char* option, kvc_context** out_context,
                                    kvc_cache** out_cache, char* error, size_t error_size) {
  kvc_context* context = nullptr;
  kvc_cache* cache = nullptr;
  kvc_cache_params params;
  kvl_cache_params_for(model, &params);
  if (!config_path) {
    if (kvc_status* s = kvc_context_create(nullptr, &context)) {
      return fail_status(s, error, error_size, "kvc_context_create");
    }
    params.dtype = KVC_DTYPE_F32;
    params.layout = KVC_LAYOUT_PAGED;
    if (kvc_status* s = kvc_cache_create(context, &params, &cache)) {
      kvc_context_destroy(context);
      return fail_status(s, error, error_size, "kvc_cache_create");
    }
  } else {
    if (kvc_status* s = kvc_context_create_from_file(config_path, &context)) {
      return fail_status(s, error, error_size, option);
    }
    std::string text;
    try {
      text = cache_document(YAML::LoadFile(config_path), config_path, params);
    } catch (const std::exception& e) {
      kvc_context_destroy(context);
      return fail(error, error_size, std::string(option) + " " + config_path + ": " + e.what());
    }
    if (kvc_status* s = kvc_cache_create_from_yaml(context, text.c_str(), &cache)) {
      kvc_context_destroy(context);
      return fail_status(s, error, error_size,
                         std::string(option) + " " + config_path + ": the cache for this model");
    }
  }
  *out_context = context;
  *out_cache = cache;
  return 0;
}
