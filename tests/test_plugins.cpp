// Plugin loading: the built-in CPU backend, and the error paths of kvc_context_load_plugin
// (bad ABI, missing file, missing entry point, oversized descriptor, failing entry point).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvcache/kvcache.h"
#include "test_support.hpp"

#ifndef KVC_TEST_BAD_ABI_PLUGIN
#error "KVC_TEST_BAD_ABI_PLUGIN must name the bad-ABI test plugin"
#endif

namespace {

struct PluginEntry {
  kvc_plugin_kind kind;
  std::string name;
  uint32_t version;
  std::string path;
};

std::vector<PluginEntry> list_plugins(const kvc_context* ctx) {
  std::vector<PluginEntry> out;
  const size_t n = kvc_context_plugin_count(ctx);
  for (size_t i = 0; i < n; ++i) {
    kvc_plugin_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    KVT_CHECK_OK(kvc_context_plugin_info(ctx, i, &info));
    REQUIRE(info.name != nullptr);
    REQUIRE(info.path != nullptr);
    out.push_back({info.kind, info.name, info.version, info.path});
  }
  return out;
}

const PluginEntry* find(const std::vector<PluginEntry>& list, kvc_plugin_kind kind,
                        const std::string& name) {
  for (const PluginEntry& e : list)
    if (e.kind == kind && e.name == name) return &e;
  return nullptr;
}

struct LogSink {
  std::mutex mutex;
  std::vector<std::pair<kvc_log_level, std::string>> messages;
  static void fn(void* user, kvc_log_level level, const char* message) {
    LogSink* self = static_cast<LogSink*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->messages.emplace_back(level, message ? message : "(null)");
  }
  bool has(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& m : messages)
      if (kvt::contains(m.second, text)) return true;
    return false;
  }
};

std::string filename(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// Checks that loading `path` fails with `code`, names the file, leaves the plugin list as it
// was, and that the message holds every string of `must_contain` (case-insensitive).
void check_refused(const char* path, kvc_status_code code,
                   const std::vector<std::string>& must_contain) {
  kvt::ContextPtr ctx = kvt::make_context();
  const std::vector<PluginEntry> before = list_plugins(ctx.get());
  kvt::Status st{kvc_context_load_plugin(ctx.get(), path)};
  INFO("loading " << std::string(path) << " returned " << st.describe());
  CHECK(st.code() == code);
  CHECK(kvt::contains(st.message(), filename(path)));
  for (const std::string& s : must_contain) CHECK(kvt::contains(kvt::lower(st.message()), kvt::lower(s)));
  const std::vector<PluginEntry> after = list_plugins(ctx.get());
  CHECK(after.size() == before.size());
}

}  // namespace

TEST_CASE("plugins: the built-in cpu backend is loaded by default") {
  kvt::ContextPtr ctx = kvt::make_context();
  const std::vector<PluginEntry> list = list_plugins(ctx.get());
  REQUIRE(list.size() >= 1);
  const PluginEntry* cpu = find(list, KVC_PLUGIN_BACKEND, "cpu");
  REQUIRE_MESSAGE(cpu != nullptr, "no backend named cpu among " << list.size() << " plugins");
  CHECK(!cpu->path.empty());
  CHECK(std::filesystem::exists(cpu->path));
  CHECK(kvt::contains(cpu->path, "kvcache/plugins"));

  // The cpu backend serves a cache, by default and by name.
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.backend = "cpu";
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);

  // Out-of-range index: an error, and the info left as it was.
  kvc_plugin_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.name = "sentinel";
  {
    kvt::Status st{kvc_context_plugin_info(ctx.get(), list.size(), &info)};
    INFO(st.describe());
    CHECK((st.code() == KVC_ERR_INVALID_ARGUMENT || st.code() == KVC_ERR_NOT_FOUND));
    CHECK(!st.message().empty());
    CHECK(std::strcmp(info.name, "sentinel") == 0);
  }
  KVT_CHECK_ERR(kvc_context_plugin_info(ctx.get(), 0, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_context_plugin_info(nullptr, 0, &info), KVC_ERR_INVALID_ARGUMENT);
  CHECK(std::strcmp(info.name, "sentinel") == 0);
  CHECK(kvc_context_plugin_count(nullptr) == 0);
}

TEST_CASE("plugins: an info struct from an older caller is written only up to its size") {
  kvt::ContextPtr ctx = kvt::make_context();
  REQUIRE(kvc_context_plugin_count(ctx.get()) >= 1);
  unsigned char raw[sizeof(kvc_plugin_info)];
  std::memset(raw, 0xCD, sizeof raw);
  kvc_plugin_info* info = reinterpret_cast<kvc_plugin_info*>(raw);
  const uint32_t old_size = static_cast<uint32_t>(offsetof(kvc_plugin_info, version));
  std::memcpy(raw, &old_size, sizeof old_size);
  KVT_REQUIRE_OK(kvc_context_plugin_info(ctx.get(), 0, info));
  CHECK(info->name != nullptr);
  bool untouched = true;
  for (size_t i = old_size; i < sizeof raw; ++i) untouched = untouched && raw[i] == 0xCD;
  CHECK_MESSAGE(untouched, "kvc_context_plugin_info wrote past the caller's struct_size");
}

TEST_CASE("plugins: a different ABI major is refused, naming the file") {
  check_refused(KVC_TEST_BAD_ABI_PLUGIN, KVC_ERR_PLUGIN, {"abi"});
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_BAD_ABI_PLUGIN)};
  CHECK(kvt::contains(st.message(), KVC_TEST_BAD_ABI_PLUGIN));  // the full path
  CHECK(find(list_plugins(ctx.get()), KVC_PLUGIN_BACKEND, "test_bad_abi") == nullptr);
}

TEST_CASE("plugins: a missing file is an error naming the file") {
  const std::string path = std::string(KVC_TEST_PLUGIN_DIR) + "/libdoes_not_exist.so";
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t before = kvc_context_plugin_count(ctx.get());
  kvt::Status st{kvc_context_load_plugin(ctx.get(), path.c_str())};
  INFO(st.describe());
  CHECK((st.code() == KVC_ERR_NOT_FOUND || st.code() == KVC_ERR_PLUGIN));
  CHECK(kvt::contains(st.message(), path));
  CHECK(kvc_context_plugin_count(ctx.get()) == before);
}

TEST_CASE("plugins: a library without kvc_plugin_entry is refused") {
  check_refused(KVC_TEST_NO_ENTRY_PLUGIN, KVC_ERR_PLUGIN, {"kvc_plugin_entry"});
}

TEST_CASE("plugins: a file that is not a shared library is refused") {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "kvc_test_not_a_library.so";
  {
    std::ofstream f(path);
    f << "this is not an ELF file\n";
  }
  check_refused(path.string().c_str(), KVC_ERR_PLUGIN, {});
  std::filesystem::remove(path);
}

TEST_CASE("plugins: a descriptor larger than the host knows is refused") {
  check_refused(KVC_TEST_BIG_DESCRIPTOR_PLUGIN, KVC_ERR_PLUGIN, {});
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_BIG_DESCRIPTOR_PLUGIN)};
  CHECK(find(list_plugins(ctx.get()), KVC_PLUGIN_POLICY, "test_policy_big") == nullptr);
}

TEST_CASE("plugins: an entry point that fails is reported with its message") {
  check_refused(KVC_TEST_FAILING_PLUGIN, KVC_ERR_PLUGIN,
                {"deliberate failure from test_policy_fail"});
}

TEST_CASE("plugins: a library the dynamic loader refuses is reported with the loader's reason") {
  // The library needs a symbol that nothing defines; the message must say which one, not
  // only that loading failed.
  check_refused(KVC_TEST_UNRESOLVED_PLUGIN, KVC_ERR_PLUGIN, {"kvc_test_symbol_defined_nowhere"});
}

TEST_CASE("plugins: NULL arguments") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_ERR(kvc_context_load_plugin(ctx.get(), nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_context_load_plugin(nullptr, KVC_TEST_POLICY_PLUGIN), KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("plugins: a good library with two policies loads; its log reaches the logger") {
  kvt::ContextPtr ctx = kvt::make_context();
  LogSink sink;
  kvc_context_set_logger(ctx.get(), &LogSink::fn, &sink, KVC_LOG_DEBUG);
  const size_t before = kvc_context_plugin_count(ctx.get());
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_POLICY_PLUGIN));
  const std::vector<PluginEntry> list = list_plugins(ctx.get());
  CHECK(list.size() == before + 2);
  const PluginEntry* a = find(list, KVC_PLUGIN_POLICY, "test_policy_a");
  const PluginEntry* b = find(list, KVC_PLUGIN_POLICY, "test_policy_b");
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(a->version == 7);
  CHECK(b->version == 8);
  CHECK(kvt::contains(a->path, filename(KVC_TEST_POLICY_PLUGIN)));
  CHECK(kvt::contains(b->path, filename(KVC_TEST_POLICY_PLUGIN)));
  CHECK(sink.has("test_policy: hello from the entry point"));

  // The same (kind, name) again.
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_POLICY_PLUGIN)};
  INFO(st.describe());
  CHECK(st.code() == KVC_ERR_ALREADY_EXISTS);
  CHECK(!st.message().empty());
  CHECK(kvc_context_plugin_count(ctx.get()) == before + 2);

  // A policy is not a backend.
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.backend = "test_policy_a";
  kvc_cache* cache = reinterpret_cast<kvc_cache*>(0x1);
  KVT_CHECK_ERR(kvc_cache_create(ctx.get(), &p, &cache), KVC_ERR_NOT_FOUND);
  CHECK(cache == reinterpret_cast<kvc_cache*>(0x1));
}

TEST_CASE("plugins: the logger's minimum level filters messages") {
  kvt::ContextPtr ctx = kvt::make_context();
  LogSink sink;
  kvc_context_set_logger(ctx.get(), &LogSink::fn, &sink, KVC_LOG_WARN);
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_POLICY_PLUGIN));
  CHECK_FALSE(sink.has("hello from the entry point"));  // logged at INFO
  {
    std::lock_guard<std::mutex> lock(sink.mutex);
    for (auto& m : sink.messages) CHECK(m.first >= KVC_LOG_WARN);
  }
  // NULL restores the default logger: the callback hears nothing more.
  kvc_context_set_logger(ctx.get(), nullptr, nullptr, KVC_LOG_DEBUG);
  size_t heard;
  {
    std::lock_guard<std::mutex> lock(sink.mutex);
    heard = sink.messages.size();
  }
  kvt::ContextPtr other = kvt::make_context();
  kvc_context_set_logger(other.get(), &LogSink::fn, &sink, KVC_LOG_DEBUG);
  kvc_context_set_logger(other.get(), nullptr, nullptr, KVC_LOG_DEBUG);
  KVT_REQUIRE_OK(kvc_context_load_plugin(other.get(), KVC_TEST_POLICY_PLUGIN));
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_BAD_ABI_PLUGIN)};
  CHECK(st.code() == KVC_ERR_PLUGIN);
  std::lock_guard<std::mutex> lock(sink.mutex);
  CHECK(sink.messages.size() == heard);
}

TEST_CASE("plugins: folders from KVC_PLUGIN_PATH and from YAML are searched") {
  // The test plugin folder also holds the broken test plugins: they are skipped, and the
  // context is still created.
  SUBCASE("environment") {
    const std::string value = std::string("/nonexistent/kvc/folder:") + KVC_TEST_PLUGIN_DIR;
    REQUIRE(setenv("KVC_PLUGIN_PATH", value.c_str(), 1) == 0);
    kvc_context* raw = nullptr;
    kvt::Status st{kvc_context_create(nullptr, &raw)};
    unsetenv("KVC_PLUGIN_PATH");
    kvt::ContextPtr ctx(raw);
    REQUIRE_MESSAGE(st.ok(), st.describe());
    const std::vector<PluginEntry> list = list_plugins(ctx.get());
    CHECK(find(list, KVC_PLUGIN_POLICY, "test_policy_a") != nullptr);
    CHECK(find(list, KVC_PLUGIN_BACKEND, "cpu") != nullptr);
    CHECK(find(list, KVC_PLUGIN_BACKEND, "test_bad_abi") == nullptr);
    CHECK(find(list, KVC_PLUGIN_POLICY, "test_policy_big") == nullptr);
  }
  SUBCASE("yaml") {
    const std::string yaml = std::string("plugins:\n  paths: [\"") + KVC_TEST_PLUGIN_DIR + "\"]\n";
    kvt::ContextPtr ctx = kvt::make_context(yaml.c_str());
    const std::vector<PluginEntry> list = list_plugins(ctx.get());
    CHECK(find(list, KVC_PLUGIN_POLICY, "test_policy_a") != nullptr);
    CHECK(find(list, KVC_PLUGIN_BACKEND, "cpu") != nullptr);
    CHECK(find(list, KVC_PLUGIN_BACKEND, "test_bad_abi") == nullptr);
  }
}

TEST_CASE("plugins: contexts are independent and plugins stay usable until destroyed") {
  kvt::ContextPtr a = kvt::make_context();
  kvt::ContextPtr b = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(a.get(), KVC_TEST_POLICY_PLUGIN));
  CHECK(find(list_plugins(a.get()), KVC_PLUGIN_POLICY, "test_policy_a") != nullptr);
  CHECK(find(list_plugins(b.get()), KVC_PLUGIN_POLICY, "test_policy_a") == nullptr);
  a.reset();
  // b still works after a is gone (a shared plugin library must not be unloaded under it).
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  kvt::CachePtr cache = kvt::make_cache(b.get(), p);
  KVT_CHECK_OK(kvc_seq_create(cache.get(), 0));
}
