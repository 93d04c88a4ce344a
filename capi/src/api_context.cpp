#include "files.hpp"
#include "handles.hpp"

namespace {

kvc_status* create_context(const std::string& yaml, const std::string& source,
                           kvc_context** out_context) {
  return kvc::guarded([&] {
    kvc::require(out_context != nullptr, "out_context is NULL");
    auto context = std::make_unique<kvc_context>();
    context->impl = std::make_unique<kvc::Context>(kvc::parse_config(yaml, source));
    *out_context = context.release();
  });
}

}  // namespace

extern "C" {

kvc_status* kvc_context_create(const char* yaml_text, kvc_context** out_context) {
  return create_context(yaml_text ? yaml_text : "", "<yaml>", out_context);
}

kvc_status* kvc_context_create_from_file(const char* path, kvc_context** out_context) {
  std::string text;
  kvc_status* status = kvc::guarded([&] {
    kvc::require(path != nullptr, "path is NULL");
    text = kvc::read_file(path, "config file");
  });
  return status ? status : create_context(text, path, out_context);
}

void kvc_context_destroy(kvc_context* context) { delete context; }

void kvc_context_set_logger(kvc_context* context, kvc_log_fn fn, void* user_data,
                            kvc_log_level min_level) {
  if (!context) return;
  kvc::Logger& logger = context->impl->logger();
  if (!fn) {
    logger.set_sink(nullptr, nullptr, KVC_LOG_WARN);  // the default, whatever the level
    return;
  }
  if (kvc::enum_in(min_level, KVC_LOG_DEBUG, KVC_LOG_OFF)) {
    logger.set_sink(fn, user_data, min_level);
    return;
  }
  try {
    logger.log(KVC_LOG_WARN, "kvc_context_set_logger: min_level " +
                                 std::to_string(kvc::raw_enum(min_level)) +
                                 " is not a kvc_log_level (0..4); the logger is unchanged");
  } catch (...) {
    // Nothing to report to: the call returns nothing.
  }
}

kvc_status* kvc_context_load_plugin(kvc_context* context, const char* path) {
  return kvc::guarded([&] {
    kvc::require(context != nullptr, "context is NULL");
    kvc::require(path != nullptr, "path is NULL");
    context->impl->plugins().load_library(path);
  });
}

size_t kvc_context_plugin_count(const kvc_context* context) {
  return context ? context->impl->plugins().count() : 0;
}

kvc_status* kvc_context_plugin_info(const kvc_context* context, size_t index,
                                    kvc_plugin_info* out_info) {
  return kvc::guarded([&] {
    kvc::require(context != nullptr, "context is NULL");
    const kvc::LoadedPlugin& plugin = context->impl->plugins().at(index);
    kvc_plugin_info info{};
    info.struct_size = sizeof(info);
    info.kind = plugin.kind;
    info.name = plugin.name.c_str();
    info.version = plugin.version;
    info.path = plugin.path.c_str();
    kvc::write_versioned(out_info, info, "out_info");
  });
}

}  // extern "C"
