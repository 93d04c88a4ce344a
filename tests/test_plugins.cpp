// Plugin loading: the built-in CPU backend, the error paths of kvc_context_load_plugin (bad
// ABI, missing file, missing entry point, oversized descriptor, failing entry point), and the
// ABI's growth rules (a 1.0 plugin on this host, a newer minor's larger vtable, and the
// number of backend calls compression makes).
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

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
#include "direct_cpu_backend.hpp"
#include "host_reads.hpp"
#include "kvcache/kvcache_plugin.h"
#include "kvcache/kvcache_rotation.h"
#include "reference_attention.hpp"
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

// ------------------------------------------------------------------ plugin ABI growth

TEST_CASE("plugins: a policy built against the frozen ABI 1.0 header loads and runs") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_ABI_1_0_PLUGIN));
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = 2;
  p.q_heads = 4;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  p.memory_limit = size_t{1} << 22;
  p.policy = "abi_1_0_oldest";
  p.budget = 6;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  constexpr int32_t kTokens = 20;
  std::vector<int32_t> positions(kTokens);
  for (int32_t t = 0; t < kTokens; ++t) positions[static_cast<size_t>(t)] = t;
  std::vector<float> q(kTokens * 4 * 8, 0.25f), kv(kTokens * 2 * 8, 0.5f), out(q.size());
  const int32_t seq = 0, n_tokens = kTokens;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n_tokens, positions.data());
  for (int32_t layer = 0; layer < 2; ++layer) {
    kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32), tk = kvt::tensor(kv.data(), KVC_DTYPE_F32);
    kvc_tensor_mut to = kvt::tensor_mut(out.data());
    KVT_CHECK_OK(kvc_append_attend(cache.get(), layer, &batch, &tq, &tk, &tk, nullptr, &to));
  }
  // Its scores (-position, with the accumulated attention it checks it receives) keep the
  // six oldest tokens of every head.
  KVT_CHECK_OK(kvc_compress(cache.get(), -1, 1, &seq));
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int32_t h = 0; h < 2; ++h) {
      CHECK(kvt::stored_positions(cache.get(), seq, layer, h) ==
            std::vector<int32_t>{0, 1, 2, 3, 4, 5});
    }
  }
  // The newest tokens were evicted: a store may go on from the newest kept one.
  const int32_t one = 1;
  for (const int32_t position : {5, 6}) {
    kvc_batch next;
    kvc_batch_init(&next, 1, &seq, &one, &position);
    kvc_tensor tk = kvt::tensor(kv.data(), KVC_DTYPE_F32);
    kvt::Status stored{kvc_append(cache.get(), 0, &next, &tk, &tk)};
    CHECK(stored.code() == (position == 5 ? KVC_ERR_INVALID_ARGUMENT : KVC_OK));
  }
}

TEST_CASE("plugins: a newer minor whose extra vtable entry is set is refused, naming it") {
  check_refused(KVC_TEST_NEWER_MINOR_NEEDED_PLUGIN, KVC_ERR_PLUGIN,
                {"newer_minor_needed", "needs a newer kvcache"});
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_NEWER_MINOR_NEEDED_PLUGIN)};
  const std::string newer = "1." + std::to_string(KVC_PLUGIN_ABI_MINOR + 1);
  CHECK(kvt::contains(st.message(), "ABI " + newer));
}

TEST_CASE("plugins: a newer minor that leaves its extra vtable entry NULL loads") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_NEWER_MINOR_UNUSED_PLUGIN));
  CHECK(find(list_plugins(ctx.get()), KVC_PLUGIN_POLICY, "newer_minor_unused") != nullptr);
}

namespace {

// Calls the counting backend received, by kind.
struct BackendCalls {
  long copy, append, attend, compact, read_keys, read_tokens, copy_to_host;
};

BackendCalls counted_calls() {
  void* handle = dlopen(KVC_TEST_COUNTING_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto calls = reinterpret_cast<int (*)(long*)>(dlsym(handle, "kvc_counting_calls"));
  const bool found = calls != nullptr;
  REQUIRE(found);
  long out[7] = {};
  REQUIRE(calls(out) == 1);
  dlclose(handle);
  return {out[0], out[1], out[2], out[3], out[4], out[5], out[6]};
}

}  // namespace

TEST_CASE("plugins: compressing a 4096-token, 8-layer cache makes O(1) backend calls per layer") {
  constexpr int32_t kLayers = 8, kKvHeads = 2, kDim = 16, kTokens = 4096, kSeqs = 2;
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_COUNTING_PLUGIN));
  for (const char* policy : {"snapkv", "knorm"}) {
    CAPTURE(policy);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = kLayers;
    p.kv_heads = kKvHeads;
    p.q_heads = 2 * kKvHeads;
    p.head_dim = kDim;
    p.dtype = KVC_DTYPE_F16;
    p.block_tokens = 16;  // 256 segments per head
    p.memory_limit = size_t{1} << 30;
    p.backend = "counting";
    p.policy = policy;
    p.budget = kTokens / 2;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    const int32_t seqs[kSeqs] = {0, 1}, n_tokens[kSeqs] = {kTokens, kTokens};
    std::vector<int32_t> positions(kSeqs * kTokens);
    for (size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int32_t>(t % kTokens);
    std::vector<float> kv(positions.size() * kKvHeads * kDim);
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>(i % 97) / 97.0f;
    for (int32_t s : seqs) REQUIRE(kvc_seq_create(cache.get(), s) == nullptr);
    kvc_batch batch;
    kvc_batch_init(&batch, kSeqs, seqs, n_tokens, positions.data());
    kvc_tensor tk = kvt::tensor(kv.data(), KVC_DTYPE_F32);
    for (int32_t layer = 0; layer < kLayers; ++layer)
      KVT_CHECK_OK(kvc_append(cache.get(), layer, &batch, &tk, &tk));
    const BackendCalls before = counted_calls();
    KVT_CHECK_OK(kvc_compress(cache.get(), -1, kSeqs, seqs));
    const BackendCalls after = counted_calls();
    // One batched read of positions and statistics, keys only for knorm, one compaction:
    // for every layer and sequence together, and no per-segment copies.
    CHECK(after.copy - before.copy == 0);
    CHECK(after.read_tokens - before.read_tokens == 1);
    CHECK(after.read_keys - before.read_keys == (std::string(policy) == "knorm" ? 1 : 0));
    CHECK(after.compact - before.compact == 1);
    CHECK(kvt::seq_length(cache.get(), 1, kLayers - 1, kKvHeads - 1) == kTokens / 2);
  }
}

// The core knows every position and length a store or an attention needs from its own
// metadata: on a GPU a read of backend memory would be a device-to-host round trip per call.
TEST_CASE("plugins: an append and an attend to a non-empty sequence read nothing back") {
  constexpr int32_t kLayers = 2, kKvHeads = 2, kQHeads = 4, kDim = 8, kPrompt = 10;
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_COUNTING_PLUGIN));
  // No policy; one that tracks statistics and one that reads keys, neither due at these steps.
  for (const char* policy : {static_cast<const char*>(nullptr), "h2o", "knorm"}) {
    CAPTURE(policy ? policy : "none");
    for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
      CAPTURE(layout);
      kvc_cache_params p;
      kvc_cache_params_init(&p);
      p.layers = kLayers;
      p.kv_heads = kKvHeads;
      p.q_heads = kQHeads;
      p.head_dim = kDim;
      p.dtype = KVC_DTYPE_F16;
      p.layout = layout;
      p.block_tokens = 4;
      p.backend = "counting";
      p.policy = policy;
      p.budget = policy ? 64 : 0;
      kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
      const int32_t seq = 0;
      REQUIRE(kvc_seq_create(cache.get(), seq) == nullptr);
      std::vector<float> kv(kPrompt * kKvHeads * kDim, 0.5f), q(kPrompt * kQHeads * kDim, 0.25f);
      std::vector<float> out(q.size());
      const kvc_tensor tk = kvt::tensor(kv.data(), KVC_DTYPE_F32);
      const kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32);
      kvc_tensor_mut to = kvt::tensor_mut(out.data());
      std::vector<int32_t> positions(kPrompt);
      for (int32_t t = 0; t < kPrompt; ++t) positions[static_cast<size_t>(t)] = t;
      kvc_batch prompt;
      kvc_batch_init(&prompt, 1, &seq, &kPrompt, positions.data());
      for (int32_t layer = 0; layer < kLayers; ++layer)
        KVT_REQUIRE_OK(kvc_append_attend(cache.get(), layer, &prompt, &tq, &tk, &tk, nullptr, &to));

      // Decode steps: append then attend on layer 0, both in one call on layer 1.
      const BackendCalls before = counted_calls();
      for (int32_t step = 0; step < 3; ++step) {
        const int32_t one = 1, pos = kPrompt + step;
        kvc_batch decode;
        kvc_batch_init(&decode, 1, &seq, &one, &pos);
        KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &decode, &tk, &tk));
        KVT_REQUIRE_OK(kvc_attend(cache.get(), 0, &decode, &tq, nullptr, &to));
        KVT_REQUIRE_OK(kvc_append_attend(cache.get(), 1, &decode, &tq, &tk, &tk, nullptr, &to));
      }
      const BackendCalls after = counted_calls();
      CHECK(after.append - before.append == 6);
      CHECK(after.attend - before.attend == 6);
      CHECK(after.read_tokens - before.read_tokens == 0);
      CHECK(after.read_keys - before.read_keys == 0);
      CHECK(after.copy_to_host - before.copy_to_host == 0);
      CHECK(after.compact - before.compact == 0);
      CHECK(kvt::seq_length(cache.get(), seq, 1, kKvHeads - 1) == kPrompt + 3);
      // The positions check still holds, decided from the same metadata.
      const int32_t one = 1, stale = kPrompt + 2;
      kvc_batch again;
      kvc_batch_init(&again, 1, &seq, &one, &stale);
      KVT_CHECK_ERR(kvc_append(cache.get(), 0, &again, &tk, &tk), KVC_ERR_INVALID_ARGUMENT);
    }
  }
}

namespace {

// The segment tables a backend keeping them resident would have uploaded and reused (the
// counting backend checks on each attend that a reused table lists the same segments).
struct TableUse {
  long uploads, reuses;
};

TableUse counted_tables() {
  void* handle = dlopen(KVC_TEST_COUNTING_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto tables = reinterpret_cast<int (*)(long*)>(dlsym(handle, "kvc_counting_tables"));
  const bool found = tables != nullptr;
  REQUIRE(found);
  long out[2] = {};
  REQUIRE(tables(out) == 1);
  dlclose(handle);
  return {out[0], out[1]};
}

}  // namespace

// A head's segment table gets a new version only when its list of segments changes: in the
// paged layout when a decode step opens a block, not on every step.
TEST_CASE("plugins: decode steps reuse a head's resident segment table until a block opens") {
  constexpr int32_t kLayers = 2, kKvHeads = 2, kQHeads = 4, kDim = 8, kBlock = 4;
  constexpr int32_t kPrompt = 10, kSteps = 14;
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_COUNTING_PLUGIN));
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = kLayers;
    p.kv_heads = kKvHeads;
    p.q_heads = kQHeads;
    p.head_dim = kDim;
    p.dtype = KVC_DTYPE_F16;
    p.layout = layout;
    p.block_tokens = kBlock;
    p.backend = "counting";
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    const int32_t seq = 0;
    REQUIRE(kvc_seq_create(cache.get(), seq) == nullptr);
    std::vector<float> kv(kPrompt * kKvHeads * kDim, 0.5f), q(kPrompt * kQHeads * kDim, 0.25f);
    std::vector<float> out(q.size());
    const kvc_tensor tk = kvt::tensor(kv.data(), KVC_DTYPE_F32);
    const kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32);
    kvc_tensor_mut to = kvt::tensor_mut(out.data());
    std::vector<int32_t> positions(kPrompt);
    for (int32_t t = 0; t < kPrompt; ++t) positions[static_cast<size_t>(t)] = t;
    kvc_batch prompt;
    kvc_batch_init(&prompt, 1, &seq, &kPrompt, positions.data());
    const TableUse before = counted_tables();
    for (int32_t layer = 0; layer < kLayers; ++layer)
      KVT_REQUIRE_OK(kvc_append_attend(cache.get(), layer, &prompt, &tq, &tk, &tk, nullptr, &to));
    for (int32_t step = 0; step < kSteps; ++step) {
      const int32_t one = 1, pos = kPrompt + step;
      kvc_batch decode;
      kvc_batch_init(&decode, 1, &seq, &one, &pos);
      for (int32_t layer = 0; layer < kLayers; ++layer)
        KVT_REQUIRE_OK(kvc_append_attend(cache.get(), layer, &decode, &tq, &tk, &tk, nullptr, &to));
    }
    const TableUse after = counted_tables();
    const long heads = kLayers * kKvHeads, attends = heads * (kSteps + 1);
    const long uploads = after.uploads - before.uploads, reuses = after.reuses - before.reuses;
    CHECK(uploads + reuses == attends);
    if (layout == KVC_LAYOUT_PAGED) {
      // Lengths 10 to 24 span 3 to 6 blocks: four lists of segments per head.
      CHECK(uploads == heads * 4);
    } else {
      // One segment, replaced only when it grows (by doubling), so most steps reuse it.
      CHECK(uploads < attends / 2);
    }
  }
}

// What makes the strict backend catch host reads of storage in the suites that run on it.
TEST_CASE("plugins: the strict backend's memory faults when the host reads it between calls") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_STRICT_PLUGIN));
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = 1;
  p.q_heads = 1;
  p.head_dim = 4;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  p.backend = "strict";
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const int32_t seq = 0, n = 3, positions[n] = {0, 1, 2};
  REQUIRE(kvc_seq_create(cache.get(), seq) == nullptr);
  const std::vector<float> kv(n * 4, 0.5f);
  const kvc_tensor t = kvt::tensor(kv.data(), KVC_DTYPE_F32);
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions);
  KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &batch, &t, &t));
  // Read through the backend: fine.
  CHECK(kvt::stored_positions(cache.get(), seq, 0, 0) == std::vector<int32_t>{0, 1, 2});
  kvc_segment_view view;
  size_t count = 0;
  KVT_REQUIRE_OK(kvc_seq_view(cache.get(), seq, 0, 0, &view, 1, &count));
  REQUIRE(count == 1);
  // Read by the host: a child process does it and must not survive it.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int quiet = ::open("/dev/null", O_WRONLY);
    ::dup2(quiet, 1);
    ::dup2(quiet, 2);
    std::signal(SIGSEGV, SIG_DFL);
    const volatile int32_t read = view.pos[0];
    (void)read;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child status " << status);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("plugins: a folder named twice, spelt two ways, loads once and warns of nothing") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvc-folder-twice-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(KVC_TEST_POLICY_PLUGIN, dir / "libkvc_twice.so", fs::copy_options::overwrite_existing);
  const std::string yaml = "plugins:\n  paths: [\"" + dir.string() + "\", \"" + (dir / ".").string() +
                           "\"]\n";
  // The context loads its folders before a logger can be set: its default one writes to stderr.
  std::fflush(stderr);
  const int saved = ::dup(2);
  std::FILE* log = std::tmpfile();
  REQUIRE(log != nullptr);
  ::dup2(::fileno(log), 2);
  kvc_context* raw = nullptr;
  kvc_status* created = kvc_context_create(yaml.c_str(), &raw);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  kvt::ContextPtr ctx(raw);
  KVT_REQUIRE_OK(created);
  std::string text;
  std::rewind(log);
  for (int c; (c = std::fgetc(log)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(log);
  INFO(text);
  CHECK(text.find("already loaded") == std::string::npos);
  const std::vector<PluginEntry> list = list_plugins(ctx.get());
  size_t copies = 0;
  for (const PluginEntry& e : list) copies += e.name == "test_policy_a" ? 1 : 0;
  CHECK(copies == 1);
  fs::remove_all(dir);
}

namespace {

// What the config_probe backend (tests/plugins/config_backend.c) recorded.
struct ConfigProbeRecord {
  int instances;
  int plain_creates;
  int32_t n_layers, n_kv_heads, n_q_heads, head_dim, block_tokens, device;
  kvc_dtype k_dtype, v_dtype;
  kvc_layout layout;
  size_t memory_limit;
  size_t n_params;
  char params[256];
  long copies_async, frees_async, synchronizes;
  void *last_copy_stream, *last_free_stream;
  long appends, appends_tensors;
  const void *last_src_k, *last_src_v;
  int32_t last_n_tokens, last_n_kv_heads;
  size_t last_n_slots;
  int covers_once;
  long on_watched, elsewhere;
  char first_elsewhere[32];
};

// The probe's record since the last call (it is cleared each time).
ConfigProbeRecord config_probe_record() {
  void* handle = dlopen(KVC_TEST_CONFIG_PROBE_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto read =
      reinterpret_cast<void (*)(ConfigProbeRecord*)>(dlsym(handle, "kvc_config_probe_record"));
  const bool found = read != nullptr;
  REQUIRE(found);
  ConfigProbeRecord out{};
  read(&out);
  dlclose(handle);
  return out;
}

// Makes the probe count the calls on `stream` apart from those on any other.
void config_probe_watch(const void* stream) {
  void* handle = dlopen(KVC_TEST_CONFIG_PROBE_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto watch =
      reinterpret_cast<void (*)(const void*)>(dlsym(handle, "kvc_config_probe_watch"));
  const bool found = watch != nullptr;
  REQUIRE(found);
  watch(stream);
  dlclose(handle);
}

kvt::ContextPtr probe_context() {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_CONFIG_PROBE_PLUGIN));
  config_probe_record();
  return ctx;
}

}  // namespace

TEST_CASE("plugins: a 1.3 backend is created with the cache's shape, formats, device and params") {
  kvt::ContextPtr ctx = probe_context();
  kvc_cache* raw = nullptr;
  const char* yaml =
      "backend:\n"
      "  name: config_probe\n"
      "  device: 3\n"
      "  params: {alpha: 1, beta: two words}\n"
      "cache: {layers: 5, kv_heads: 2, q_heads: 6, head_dim: 24,\n"
      "        dtype: f32, block_tokens: 32, memory_limit: 3MiB}\n";
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx.get(), yaml, &raw));
  kvt::CachePtr cache(raw);
  const ConfigProbeRecord r = config_probe_record();
  CHECK(r.instances == 1);
  CHECK(r.plain_creates == 0);
  CHECK(r.n_layers == 5);
  CHECK(r.n_kv_heads == 2);
  CHECK(r.n_q_heads == 6);
  CHECK(r.head_dim == 24);
  CHECK(r.k_dtype == KVC_DTYPE_F32);
  CHECK(r.v_dtype == KVC_DTYPE_F32);
  CHECK(r.layout == KVC_LAYOUT_PAGED);
  CHECK(r.block_tokens == 32);
  CHECK(r.memory_limit == size_t{3} << 20);
  CHECK(r.device == 3);
  CHECK(r.n_params == 2);
  CHECK(std::string(r.params) == "alpha=1;beta=two words;");
}

TEST_CASE("plugins: a cache from C parameters gives a 1.3 backend no device and no params") {
  kvt::ContextPtr ctx = probe_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F16;
  p.layout = KVC_LAYOUT_CONTIGUOUS;
  p.backend = "config_probe";
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const ConfigProbeRecord r = config_probe_record();
  CHECK(r.instances == 1);
  CHECK(r.n_layers == 2);
  CHECK(r.k_dtype == KVC_DTYPE_F16);
  CHECK(r.layout == KVC_LAYOUT_CONTIGUOUS);
  CHECK(r.device == -1);
  CHECK(r.n_params == 0);
}

TEST_CASE("plugins: a 1.3 backend's refusal of a configuration is kvc_cache_create's status") {
  kvt::ContextPtr ctx = probe_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.dtype = KVC_DTYPE_BF16;
  p.backend = "config_probe";
  kvc_cache* raw = nullptr;
  kvt::Status refused{kvc_cache_create(ctx.get(), &p, &raw)};
  CHECK(refused.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(refused.message(), "backend 'config_probe'"));
  CHECK(kvt::contains(refused.message(), "lacks bf16 K storage"));
  CHECK(raw == nullptr);

  kvt::Status from_yaml{kvc_cache_create_from_yaml(
      ctx.get(), "backend: {name: config_probe, params: {refuse: paged attention}}\n", &raw)};
  CHECK(from_yaml.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(from_yaml.message(), "lacks paged attention"));
  CHECK(raw == nullptr);
  CHECK(config_probe_record().instances == 0);
}

TEST_CASE("plugins: the cpu backend refuses what it cannot serve when created with a config") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache* raw = nullptr;
  kvt::Status params{kvc_cache_create_from_yaml(
      ctx.get(), "backend: {name: cpu, params: {threads: 4}}\n", &raw)};
  CHECK(params.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(params.message(), "backend.params.threads"));
  kvt::Status device{kvc_cache_create_from_yaml(ctx.get(), "backend: {name: cpu, device: 1}\n",
                                                &raw)};
  CHECK(device.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(device.message(), "backend.device 1"));
  CHECK(raw == nullptr);
  KVT_CHECK_OK(kvc_cache_create_from_yaml(ctx.get(), "backend: {name: cpu, device: 0}\n", &raw));
  kvc_cache_destroy(raw);
}

TEST_CASE("plugins: growth copies and frees go through a 1.3 backend's stream entries") {
  constexpr int32_t kDim = 8, kFirst = 4, kSecond = 40;
  kvt::ContextPtr ctx = probe_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.head_dim = kDim;
  p.dtype = KVC_DTYPE_F32;
  p.layout = KVC_LAYOUT_CONTIGUOUS;
  p.backend = "config_probe";
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  int engine_stream = 0;  // stands for the engine's stream; the CPU backend never reads it
  std::vector<float> rows(static_cast<size_t>(kSecond) * kDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  kvc_tensor t = kvt::tensor(rows.data(), KVC_DTYPE_F32);
  const int32_t seq = 0;
  int32_t position = 0;
  for (int32_t n : {kFirst, kSecond}) {
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int32_t& pos : positions) pos = position++;
    kvc_batch batch;
    kvc_batch_init(&batch, 1, &seq, &n, positions.data());
    batch.stream = &engine_stream;
    KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &batch, &t, &t));
  }
  const ConfigProbeRecord r = config_probe_record();
  // The second append outgrew the first segment: its K, V and positions were moved on the
  // engine's stream and the old segment released on it, with no wait for the device.
  CHECK(r.copies_async == 3);
  CHECK(r.last_copy_stream == &engine_stream);
  CHECK(r.frees_async == 1);
  CHECK(r.last_free_stream == &engine_stream);
  CHECK(r.synchronizes == 0);
  // The moved tokens are those appended: K of token 1 (row 1 of the first append).
  kvc_segment_view views[4];
  size_t n_views = 0;
  KVT_REQUIRE_OK(kvc_seq_view(cache.get(), 0, 0, 0, views, 4, &n_views));
  REQUIRE(n_views == 1);
  REQUIRE(views[0].count == kFirst + kSecond);
  CHECK(static_cast<const float*>(views[0].k)[kDim + 2] == rows[kDim + 2]);
  CHECK(static_cast<const float*>(views[0].k)[kFirst * kDim] == rows[0]);
}

namespace {

// Appends `n` tokens to `seq` on every layer and attends over them, on `stream`.
void append_attend_on(kvc_cache* cache, int32_t layers, int32_t seq, int32_t first, int32_t n,
                      void* stream) {
  constexpr int32_t kDim = 8;
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = first + t;
  std::vector<float> rows(static_cast<size_t>(n) * kDim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.01f * static_cast<float>(i % 97);
  std::vector<float> out(rows.size());
  const kvc_tensor t = kvt::tensor(rows.data(), KVC_DTYPE_F32);
  kvc_tensor_mut o = kvt::tensor_mut(out.data());
  kvc_attention_params a;
  kvc_attention_params_init(&a);
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions.data());
  batch.stream = stream;
  for (int32_t layer = 0; layer < layers; ++layer) {
    KVT_REQUIRE_OK(kvc_append_attend(cache, layer, &batch, &t, &t, &t, &a, &o));
  }
}

}  // namespace

TEST_CASE("plugins: every backend call that names no stream runs on the cache's stream") {
  constexpr int32_t kLayers = 2;
  kvt::ContextPtr ctx = probe_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 4;
  p.backend = "config_probe";
  p.policy = "h2o";
  p.budget = 12;
  p.sinks = 2;
  p.recent = 4;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  int engine_stream = 0, batch_stream = 0;  // stand for streams; the CPU backend never reads them
  KVT_REQUIRE_OK(kvc_cache_set_stream(cache.get(), &engine_stream));
  config_probe_watch(&engine_stream);
  config_probe_record();

  // Batches without a stream of their own, compression, a fork whose append unshares a block,
  // truncation, removal of a range (copying shared blocks), export and import.
  REQUIRE(kvc_seq_create(cache.get(), 0) == nullptr);
  append_attend_on(cache.get(), kLayers, 0, 0, 30, nullptr);
  const int32_t seq0 = 0;
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq0));
  KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));
  append_attend_on(cache.get(), kLayers, 1, 30, 3, nullptr);
  KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 1, 3, 9));
  KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 0, 25));
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache.get(), 1, &size));
  std::vector<unsigned char> image(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache.get(), 1, image.data(), image.size(), &written));
  KVT_REQUIRE_OK(kvc_seq_import(cache.get(), 2, image.data(), written));
  KVT_REQUIRE_OK(kvc_seq_remove(cache.get(), 2));
  ConfigProbeRecord r = config_probe_record();
  CHECK(r.on_watched > 20);
  CHECK(r.copies_async > 0);
  CHECK(r.frees_async > 0);
  CHECK(r.synchronizes > 0);
  CHECK(r.elsewhere == 0);
  CHECK(std::string(r.first_elsewhere) == "");

  // A batch's own stream wins for everything its call does.
  config_probe_watch(&batch_stream);
  append_attend_on(cache.get(), kLayers, 0, 40, 9, &batch_stream);
  r = config_probe_record();
  CHECK(r.on_watched >= 2 * kLayers);
  CHECK(r.elsewhere == 0);

  // NULL is the backend's default again, and destruction never uses the engine's stream.
  config_probe_watch(&engine_stream);
  KVT_REQUIRE_OK(kvc_cache_set_stream(cache.get(), nullptr));
  append_attend_on(cache.get(), kLayers, 0, 60, 1, nullptr);
  r = config_probe_record();
  CHECK(r.on_watched == 0);
  CHECK(r.elsewhere >= 2 * kLayers);
  KVT_REQUIRE_OK(kvc_cache_set_stream(cache.get(), &engine_stream));
  cache.reset();
  r = config_probe_record();
  CHECK(r.frees_async > 0);
  CHECK(r.on_watched == 0);
  config_probe_watch(nullptr);
}

TEST_CASE("plugins: a 1.4 backend gets each append once, the tensors whole, every row in one slot") {
  constexpr int32_t kHeads = 3, kDim = 4;
  kvt::ContextPtr ctx = probe_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = kHeads;
  p.q_heads = kHeads;
  p.head_dim = kDim;
  p.k_dtype = KVC_DTYPE_F32;
  p.v_dtype = KVC_DTYPE_F16;
  p.block_tokens = 4;  // a sequence's new tokens span several blocks: several slots per head
  p.backend = "config_probe";
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const int32_t ids[] = {4, 9, 2};
  for (int32_t id : ids) REQUIRE(kvc_seq_create(cache.get(), id) == nullptr);
  int32_t length[3] = {};
  for (const auto& n_tokens : {std::vector<int32_t>{3, 9, 1}, std::vector<int32_t>{1, 6, 2}}) {
    const int32_t total = n_tokens[0] + n_tokens[1] + n_tokens[2];
    std::vector<int32_t> positions;
    for (size_t s = 0; s < 3; ++s) {
      for (int32_t t = 0; t < n_tokens[s]; ++t) positions.push_back(length[s] + t);
      length[s] += n_tokens[s];
    }
    std::vector<float> rows(static_cast<size_t>(total) * kHeads * kDim, 0.5f);
    const kvc_tensor t = kvt::tensor(rows.data(), KVC_DTYPE_F32);
    kvc_batch batch;
    kvc_batch_init(&batch, 3, ids, n_tokens.data(), positions.data());
    KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &batch, &t, &t));
    const ConfigProbeRecord r = config_probe_record();
    CHECK(r.appends == 0);
    CHECK(r.appends_tensors == 1);
    CHECK(r.last_src_k == rows.data());
    CHECK(r.last_src_v == rows.data());
    CHECK(r.last_n_tokens == total);
    CHECK(r.last_n_kv_heads == kHeads);
    CHECK(r.last_n_slots > static_cast<size_t>(3 * kHeads));
    CHECK(r.covers_once == 1);
  }
}

using kvt::cpu_backend;
using kvt::direct_host;

TEST_CASE("plugins: a cpu instance that rotates K rotates the engine's rows, not stored ones") {
  constexpr int32_t kDim = 8, kTokens = 2;
  const kvc_host_api host = direct_host();
  const kvc_backend_vtable* cpu = cpu_backend(host);
  kvc_backend_config config{};
  config.struct_size = sizeof(config);
  config.n_layers = config.n_kv_heads = config.n_q_heads = 1;
  config.head_dim = kDim;
  config.k_dtype = config.v_dtype = KVC_DTYPE_F32;
  config.block_tokens = 4;
  config.device = -1;
  config.memory_limit = 1 << 20;
  config.k_rotation = KVC_ROTATION_HADAMARD;
  void* instance = nullptr;
  kvc_plugin_error error{};
  REQUIRE(cpu->create_with_config(&host, &config, &instance, &error) == KVC_OK);
  std::vector<float> k(kTokens * kDim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i % 5) - 1.5f;
    v[i] = static_cast<float>(i);
  }
  const std::vector<int32_t> positions = {0, 1};
  for (int32_t k_rotated : {0, 1}) {
    CAPTURE(k_rotated);
    std::vector<float> k_store(k.size()), v_store(v.size());
    std::vector<int32_t> pos_store(kTokens);
    kvc_append_slot slot{};
    slot.struct_size = sizeof(slot);
    slot.n_tokens = kTokens;
    slot.dst_k = k_store.data();
    slot.dst_v = v_store.data();
    slot.dst_pos = pos_store.data();
    kvc_append_tensors_call call{};
    call.struct_size = sizeof(call);
    call.head_dim = kDim;
    call.n_kv_heads = 1;
    call.n_tokens = kTokens;
    call.k_dtype = call.v_dtype = call.src_k_dtype = call.src_v_dtype = KVC_DTYPE_F32;
    call.src_k = k.data();
    call.src_v = v.data();
    call.src_device = KVC_DEVICE_HOST;
    call.src_k_token_stride = call.src_v_token_stride = kDim;
    call.src_pos = positions.data();
    call.slots = &slot;
    call.n_slots = 1;
    call.k_rotated = k_rotated;
    REQUIRE(cpu->append_tensors(instance, &call, &error) == KVC_OK);
    std::vector<float> expected = k;
    if (!k_rotated) {
      for (int32_t t = 0; t < kTokens; ++t) {
        kvc_rotation_apply(KVC_ROTATION_HADAMARD, expected.data() + t * kDim, kDim);
      }
    }
    CHECK(k_store == expected);
    CHECK(v_store == v);
  }
  // Append jobs cannot say which rows they carry: refused.
  kvc_append_call jobs{};
  jobs.struct_size = sizeof(jobs);
  jobs.head_dim = kDim;
  jobs.storage_dtype = jobs.v_dtype = KVC_DTYPE_F32;
  CHECK(cpu->append(instance, &jobs, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(error.message, "an instance that rotates K takes append_tensors"));
  cpu->destroy(instance);
}

TEST_CASE("plugins: the cpu backend's append_tensors stores heads of any head stride in any slot") {
  constexpr int32_t kHeads = 3, kDim = 128;
  // K: f32 heads 2 * kDim + 8 elements apart (other data between them), stored as f16. V:
  // bf16 heads kDim + 3 apart, stored as it is.
  constexpr size_t kKHeadStride = 2 * kDim + 8, kKTokenStride = kHeads * kKHeadStride + 16;
  constexpr size_t kVHeadStride = kDim + 3, kVTokenStride = kHeads * kVHeadStride + 5;
  const kvc_host_api host = direct_host();
  const kvc_backend_vtable* cpu = cpu_backend(host);
  const bool has_append_tensors = cpu->append_tensors != nullptr;
  REQUIRE(has_append_tensors);
  void* instance = nullptr;
  kvc_plugin_error error{};
  REQUIRE(cpu->create(&host, &instance, &error) == KVC_OK);
  auto k_value = [](size_t t, size_t h, size_t i) {
    return static_cast<float>((t * 31 + h * 7 + i) % 1999) * 0.25f - 200.0f;
  };
  auto v_value = [](size_t t, size_t h, size_t i) {
    return static_cast<float>((t * 13 + h * 101 + i * 3) % 883) * -0.5f + 100.0f;
  };
  // 6 tokens: copied slot by slot; 3000 (6 MiB stored): in token order.
  for (int32_t n_tokens : {6, 3000}) {
    CAPTURE(n_tokens);
    const size_t n = static_cast<size_t>(n_tokens);
    std::vector<float> k(n * kKTokenStride, 1e30f);
    std::vector<uint16_t> v(n * kVTokenStride, 0x7fc0);
    std::vector<int32_t> positions(n);
    for (size_t t = 0; t < n; ++t) {
      positions[t] = static_cast<int32_t>(1000 + 3 * t);
      for (size_t h = 0; h < kHeads; ++h) {
        for (size_t i = 0; i < kDim; ++i) {
          k[t * kKTokenStride + h * kKHeadStride + i] = k_value(t, h, i);
          v[t * kVTokenStride + h * kVHeadStride + i] = ref::f32_to_bf16(v_value(t, h, i));
        }
      }
    }
    // Each head's tokens in runs of its own lengths, to storage of its own; the slots listed
    // last run first.
    std::vector<std::vector<uint16_t>> k_store(kHeads, std::vector<uint16_t>(n * kDim));
    std::vector<std::vector<uint16_t>> v_store(kHeads, std::vector<uint16_t>(n * kDim));
    std::vector<std::vector<int32_t>> pos_store(kHeads, std::vector<int32_t>(n, -1));
    std::vector<std::vector<float>> sums(kHeads, std::vector<float>(n, 7.0f));
    std::vector<kvc_append_slot> slots;
    for (int32_t h = 0; h < kHeads; ++h) {
      const size_t hh = static_cast<size_t>(h);
      const int32_t run = 1 + (h + 1) * n_tokens / 5;
      for (int32_t first = 0; first < n_tokens; first += run) {
        kvc_append_slot slot{};
        slot.struct_size = sizeof(slot);
        slot.first_token = first;
        slot.n_tokens = std::min(run, n_tokens - first);
        slot.kv_head = h;
        const size_t at = static_cast<size_t>(first);
        slot.dst_k = k_store[hh].data() + at * kDim;
        slot.dst_v = v_store[hh].data() + at * kDim;
        slot.dst_pos = pos_store[hh].data() + at;
        slot.dst_stats.attn_sum = sums[hh].data() + at;
        slots.insert(slots.begin(), slot);
      }
    }
    kvc_append_tensors_call call{};
    call.struct_size = sizeof(call);
    call.head_dim = kDim;
    call.n_kv_heads = kHeads;
    call.n_tokens = n_tokens;
    call.k_dtype = KVC_DTYPE_F16;
    call.v_dtype = KVC_DTYPE_BF16;
    call.src_k = k.data();
    call.src_v = v.data();
    call.src_k_dtype = KVC_DTYPE_F32;
    call.src_v_dtype = KVC_DTYPE_BF16;
    call.src_device = KVC_DEVICE_HOST;
    call.src_k_token_stride = kKTokenStride;
    call.src_k_head_stride = kKHeadStride;
    call.src_v_token_stride = kVTokenStride;
    call.src_v_head_stride = kVHeadStride;
    call.src_pos = positions.data();
    call.slots = slots.data();
    call.n_slots = slots.size();
    REQUIRE(cpu->append_tensors(instance, &call, &error) == KVC_OK);
    size_t wrong_k = 0, wrong_v = 0, wrong_pos = 0, wrong_sums = 0;
    for (size_t h = 0; h < kHeads; ++h) {
      for (size_t t = 0; t < n; ++t) {
        wrong_pos += pos_store[h][t] != positions[t];
        wrong_sums += sums[h][t] != 0.0f;
        for (size_t i = 0; i < kDim; ++i) {
          wrong_k += k_store[h][t * kDim + i] != ref::f32_to_f16(k_value(t, h, i));
          wrong_v += v_store[h][t * kDim + i] != ref::f32_to_bf16(v_value(t, h, i));
        }
      }
    }
    CHECK(wrong_k == 0);
    CHECK(wrong_v == 0);
    CHECK(wrong_pos == 0);
    CHECK(wrong_sums == 0);
  }
  cpu->destroy(instance);
}

TEST_CASE("plugins: the backend skeleton refuses an append_tensors slot outside its tensors") {
  const kvc_host_api host = direct_host();
  const kvc_backend_vtable* cpu = cpu_backend(host);
  void* instance = nullptr;
  kvc_plugin_error error{};
  REQUIRE(cpu->create(&host, &instance, &error) == KVC_OK);
  std::vector<float> rows(4 * 2 * 8, 1.0f), k_store(4 * 8, -1.0f), v_store(4 * 8, -1.0f);
  std::vector<int32_t> positions = {0, 1, 2, 3}, pos_store(4, -1);
  kvc_append_slot slot{};
  slot.struct_size = sizeof(slot);
  slot.n_tokens = 4;
  slot.dst_k = k_store.data();
  slot.dst_v = v_store.data();
  slot.dst_pos = pos_store.data();
  kvc_append_tensors_call call{};
  call.struct_size = sizeof(call);
  call.head_dim = 8;
  call.n_kv_heads = 2;
  call.n_tokens = 4;
  call.src_k = call.src_v = rows.data();
  call.src_k_token_stride = call.src_v_token_stride = 16;
  call.src_k_head_stride = call.src_v_head_stride = 8;
  call.src_pos = positions.data();
  call.slots = &slot;
  call.n_slots = 1;
  struct Case {
    const char* what;
    int32_t first_token, n_tokens, kv_head;
  };
  for (const Case& c : {Case{"past the last token", 1, 4, 0}, Case{"a KV head too many", 0, 4, 2},
                        Case{"a negative head", 0, 4, -1}, Case{"a negative first token", -1, 2, 0}}) {
    CAPTURE(c.what);
    slot.first_token = c.first_token;
    slot.n_tokens = c.n_tokens;
    slot.kv_head = c.kv_head;
    CHECK(cpu->append_tensors(instance, &call, &error) == KVC_ERR_INVALID_ARGUMENT);
    CHECK(kvt::contains(error.message, "outside the call's 4 tokens and 2 KV heads"));
    CHECK(pos_store == std::vector<int32_t>(4, -1));
  }
  cpu->destroy(instance);
}

TEST_CASE("plugins: a backend with only some of the 1.3 stream entries is refused") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_PARTIAL_STREAMS_PLUGIN)};
  CHECK(st.code() == KVC_ERR_PLUGIN);
  CHECK(kvt::contains(st.message(), "'partial_streams'"));
  CHECK(kvt::contains(st.message(), "sets some of copy_async, free_async and synchronize"));
}
