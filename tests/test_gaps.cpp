// The reliability issue's smaller gaps, each checked at its boundary: user text in messages
// (sanitised, bounded), position order on append, the layer of kvc_compress, folders where a
// file is expected, context settings in a cache's YAML, plugin names given twice, forwarded
// scorer parameters and enum values no enumerator has.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "host_reads.hpp"
#include "raw_enum_calls.h"
#include "test_support.hpp"

namespace {

// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or code
// points above U+10FFFF).
bool is_utf8(const std::string& text) {
  static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t extra = 0;
    uint32_t cp = c;
    if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07u;
    } else if (c >= 0x80) {
      return false;
    }
    if (i + extra >= text.size() + (extra == 0 ? 1 : 0)) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

// A status message that quotes user text must stay readable and short.
void check_quoted(const kvt::Status& st, const std::string& must_contain) {
  INFO("message: " << st.message().substr(0, 2000));
  CHECK(!st.ok());
  CHECK(is_utf8(st.message()));
  CHECK(st.message().size() < 1200);
  CHECK(kvt::contains(st.message(), must_contain));
}

kvt::Status create_context(const std::string& yaml) {
  kvc_context* ctx = nullptr;
  kvt::Status st{kvc_context_create(yaml.c_str(), &ctx)};
  kvc_context_destroy(ctx);
  return st;
}

}  // namespace

TEST_CASE("gaps: user text in messages is sanitised and bounded") {
  const std::string huge(10u << 20, 'a');
  SUBCASE("a YAML key that is not UTF-8") {
    check_quoted(create_context("cache:\n  \xff\xfe: 1\n"), "\\xFF\\xFE");
  }
  SUBCASE("a YAML value that is not UTF-8") {
    check_quoted(create_context("cache:\n  dtype: \"f\xc0\\x80\"\n"), "\\xC0");
  }
  SUBCASE("a 10 MiB YAML value") {
    check_quoted(create_context("cache:\n  dtype: " + huge + "\n"), "...' (10485760 bytes)");
  }
  SUBCASE("a 10 MiB YAML key") {
    check_quoted(create_context("cache:\n  ? " + huge + "\n  : 1\n"),
                 "... (10485766 bytes): unknown key");
  }
  SUBCASE("a 10 MiB byte size") {
    check_quoted(create_context("cache:\n  memory_limit: 1" + huge + "\n"), "(10485761 bytes)");
  }
  SUBCASE("a 10 MiB policy name from C") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.policy = huge.c_str();
    p.budget = 8;
    kvc_cache* cache = nullptr;
    check_quoted(kvt::Status{kvc_cache_create(ctx.get(), &p, &cache)}, "(10485760 bytes)");
  }
  SUBCASE("a backend name that is not UTF-8, from C") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.backend = "cpu\xe2\x82";
    kvc_cache* cache = nullptr;
    check_quoted(kvt::Status{kvc_cache_create(ctx.get(), &p, &cache)}, "'cpu\\xE2\\x82'");
  }
  SUBCASE("a policy parameter key that is not UTF-8, echoed by the plugin") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache* cache = nullptr;
    check_quoted(kvt::Status{kvc_cache_create_from_yaml(
                     ctx.get(), "policy:\n  name: snapkv\n  budget: 8\n  params:\n    \xf5x: 1\n",
                     &cache)},
                 "\\xF5");
  }
  SUBCASE("paths that are not UTF-8 or are 10 MiB long") {
    kvc_context* ctx = nullptr;
    check_quoted(kvt::Status{kvc_context_create_from_file("/nonexistent/\xff.yaml", &ctx)},
                 "\\xFF");
    check_quoted(kvt::Status{kvc_context_create_from_file(huge.c_str(), &ctx)},
                 "(10485760 bytes)");
    check_quoted(create_context("plugins:\n  paths: [/nonexistent/\xff]\n"), "\\xFF");
    kvt::ContextPtr owner = kvt::make_context();
    check_quoted(kvt::Status{kvc_context_load_plugin(owner.get(), huge.c_str())},
                 "(10485760 bytes)");
    check_quoted(kvt::Status{kvc_context_load_plugin(owner.get(), "/nonexistent/\x80.so")},
                 "\\x80");
  }
}

namespace {

// One f32 append of `positions` (one sequence, one KV head of head_dim 4) on `layer`.
kvt::Status append(kvc_cache* cache, int32_t seq, const std::vector<int32_t>& positions,
                   int32_t layer = 0) {
  const int32_t n = static_cast<int32_t>(positions.size());
  std::vector<float> kv(static_cast<size_t>(n) * 4, 0.5f);
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions.data());
  const kvc_tensor t = kvt::tensor(kv.data(), KVC_DTYPE_F32);
  return kvt::Status{kvc_append(cache, layer, &batch, &t, &t)};
}

kvc_cache_params small_params() {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = 1;
  p.head_dim = 4;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 2;
  return p;
}


struct Captured {
  std::vector<std::pair<kvc_log_level, std::string>> messages;
  bool has(const std::string& text) const {
    for (const auto& m : messages) {
      if (kvt::contains(m.second, text)) return true;
    }
    return false;
  }
};

void capture(void* user_data, kvc_log_level level, const char* message) {
  static_cast<Captured*>(user_data)->messages.emplace_back(level, message);
}

template <typename E>
void set_raw(E* field, int value) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  std::memcpy(field, &value, sizeof value);
}

}  // namespace

TEST_CASE("gaps: positions increase strictly within a sequence, across appends too") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    CAPTURE(layout);
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p = small_params();
    p.layout = layout;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 1));
    REQUIRE(append(cache.get(), 0, {0, 1, 5}).ok());
    const kvc_cache_stats before = kvt::get_stats(cache.get());

    struct Case {
      std::vector<int32_t> positions;
      const char* says;
    };
    for (const Case& c : {Case{{3}, "batch.positions[0] = 3"}, Case{{5}, "batch.positions[0] = 5"},
                          Case{{6, 8, 7}, "batch.positions[2] = 7"},
                          Case{{6, 6}, "batch.positions[1] = 6"}}) {
      kvt::Status st = append(cache.get(), 0, c.positions);
      INFO(st.describe());
      CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
      CHECK(kvt::contains(st.message(), c.says));
      CHECK(kvt::contains(st.message(), "sequence 0"));
      CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
      CHECK(kvt::stored_positions(cache.get(), 0, 0, 0) == std::vector<int32_t>{0, 1, 5});
    }
    {
      kvt::Status st = append(cache.get(), 0, {4});
      CHECK(kvt::contains(st.message(), "does not follow position 5, the newest stored on layer 0"));
    }
    // append_attend checks before it stores or attends.
    {
      const int32_t seq = 0, n = 1, pos = 2;
      std::vector<float> kv(4, 0.5f), q(4, 0.5f), out(4, -1.0f);
      kvc_batch batch;
      kvc_batch_init(&batch, 1, &seq, &n, &pos);
      const kvc_tensor t = kvt::tensor(kv.data(), KVC_DTYPE_F32);
      const kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32);
      kvc_tensor_mut to = kvt::tensor_mut(out.data());
      KVT_CHECK_ERR(kvc_append_attend(cache.get(), 0, &batch, &tq, &t, &t, nullptr, &to),
                    KVC_ERR_INVALID_ARGUMENT);
      CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
    }
    // Other sequences and layers have their own order; truncation makes room again.
    CHECK(append(cache.get(), 1, {0, 1}).ok());
    CHECK(append(cache.get(), 0, {0}, 1).ok());
    KVT_CHECK_OK(kvc_seq_truncate(cache.get(), 0, 1));
    CHECK(append(cache.get(), 0, {1, 2}).ok());
    CHECK(kvt::stored_positions(cache.get(), 0, 0, 0) == std::vector<int32_t>{0, 1, 2});
  }
}

TEST_CASE("gaps: kvc_compress takes -1 for all layers and no other negative layer") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = small_params();
  p.policy = "streaming";
  p.budget = 2;
  p.sinks = 1;
  p.recent = 1;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  const int32_t seq = 0;
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), seq));
  for (int32_t layer = 0; layer < 2; ++layer) {
    REQUIRE(append(cache.get(), seq, {0, 1, 2, 3}, layer).ok());
  }
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  for (int32_t layer : {-2, -100, INT32_MIN, 2}) {
    CAPTURE(layer);
    kvt::Status st{kvc_compress(cache.get(), layer, 1, &seq)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(kvt::contains(st.message(), "layer " + std::to_string(layer)));
    CHECK(kvt::contains(st.message(), "-1 (all layers) or 0..1"));
    CHECK(kvt::stats_equal(kvt::get_stats(cache.get()), before));
  }
  KVT_CHECK_OK(kvc_compress(cache.get(), -1, 1, &seq));
  CHECK(kvt::seq_length(cache.get(), seq, 0, 0) == 2);
  CHECK(kvt::seq_length(cache.get(), seq, 1, 0) == 2);
}

TEST_CASE("gaps: a folder where a file is expected is refused, naming it") {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "kvc_gaps_folder.yaml";
  std::filesystem::create_directories(folder);
  const std::string path = folder.string();
  {
    kvc_context* ctx = nullptr;
    kvt::Status st{kvc_context_create_from_file(path.c_str(), &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_IO);
    CHECK(kvt::contains(st.message(), "'" + path + "' is a folder"));
    CHECK(ctx == nullptr);
    kvc_context_destroy(ctx);
  }
  kvt::ContextPtr ctx = kvt::make_context();
  {
    const size_t plugins = kvc_context_plugin_count(ctx.get());
    kvt::Status st{kvc_context_load_plugin(ctx.get(), path.c_str())};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_IO);
    CHECK(kvt::contains(st.message(), "'" + path + "' is a folder"));
    CHECK(kvc_context_plugin_count(ctx.get()) == plugins);
  }
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), small_params());
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  REQUIRE(append(cache.get(), 0, {0, 1}).ok());
  {
    kvt::Status st{kvc_seq_import_file(cache.get(), 1, path.c_str())};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_IO);
    CHECK(kvt::contains(st.message(), "'" + path + "' is a folder"));
  }
  {
    kvt::Status st{kvc_seq_export_file(cache.get(), 0, path.c_str())};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_IO);
    CHECK(kvt::contains(st.message(), "'" + path + "' is a folder"));
    CHECK(!std::filesystem::exists(path + ".tmp"));
    CHECK(std::filesystem::is_empty(folder));
  }
  CHECK(kvt::get_stats(cache.get()).sequences == 1);
  std::filesystem::remove_all(folder);
}

TEST_CASE("gaps: a cache's YAML refuses context settings it cannot honour") {
  const std::string cache_yaml = "cache:\n  head_dim: 4\n";
  kvt::ContextPtr ctx = kvt::make_context("threads: 2\n");
  kvc_cache* cache = nullptr;
  SUBCASE("threads the context has") {
    KVT_CHECK_OK(kvc_cache_create_from_yaml(ctx.get(), ("threads: 2\n" + cache_yaml).c_str(), &cache));
    kvc_cache_destroy(cache);
  }
  SUBCASE("other threads") {
    kvt::Status st{kvc_cache_create_from_yaml(ctx.get(), ("threads: 3\n" + cache_yaml).c_str(), &cache)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "threads"));
    CHECK(kvt::contains(st.message(), "kvc_context_create"));
    CHECK(cache == nullptr);
  }
  SUBCASE("a plugin folder that does not exist") {
    kvt::Status st{kvc_cache_create_from_yaml(
        ctx.get(), ("plugins:\n  paths: [/nonexistent/kvc_gaps]\n" + cache_yaml).c_str(), &cache)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_NOT_FOUND);
    CHECK(kvt::contains(st.message(), "plugins.paths: '/nonexistent/kvc_gaps' does not exist"));
    CHECK(cache == nullptr);
  }
  SUBCASE("a plugin folder the context did not load") {
    const std::string folder = std::filesystem::temp_directory_path().string();
    kvt::Status st{kvc_cache_create_from_yaml(
        ctx.get(), ("plugins:\n  paths: [" + folder + "]\n" + cache_yaml).c_str(), &cache)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "plugins.paths: '" + folder + "'"));
    CHECK(kvt::contains(st.message(), "kvc_context_create"));
    CHECK(cache == nullptr);
  }
  SUBCASE("the plugin folders the context loaded") {
    const std::string plugins = std::string("plugins:\n  paths: [") + KVC_TEST_PLUGIN_DIR + "]\n";
    kvt::ContextPtr with_plugins = kvt::make_context(plugins.c_str());
    KVT_CHECK_OK(kvc_cache_create_from_yaml(with_plugins.get(), (plugins + cache_yaml).c_str(), &cache));
    kvc_cache_destroy(cache);
  }
}

TEST_CASE("gaps: one library naming a plugin twice is refused whole") {
  kvt::ContextPtr ctx = kvt::make_context();
  const size_t before = kvc_context_plugin_count(ctx.get());
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_GAPS_DUPLICATE_PLUGIN)};
  INFO(st.describe());
  CHECK(st.code() == KVC_ERR_ALREADY_EXISTS);
  CHECK(kvt::contains(st.message(), "'gaps_twice'"));
  CHECK(kvt::contains(st.message(), "descriptors 1 and 2"));
  CHECK(kvt::contains(st.message(), KVC_TEST_GAPS_DUPLICATE_PLUGIN));
  CHECK(kvc_context_plugin_count(ctx.get()) == before);
  // Named in plugins.paths, the library fails the context.
  const std::string yaml = std::string("plugins:\n  paths: [") + KVC_TEST_GAPS_DUPLICATE_PLUGIN + "]\n";
  kvc_context* other = nullptr;
  kvt::Status from_yaml{kvc_context_create(yaml.c_str(), &other)};
  CHECK(from_yaml.code() == KVC_ERR_ALREADY_EXISTS);
  CHECK(other == nullptr);
  kvc_context_destroy(other);
}

TEST_CASE("gaps: a plugin named like one of another library is refused, naming both files") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_GAPS_WRAPPER_PLUGIN));
  const size_t before = kvc_context_plugin_count(ctx.get());
  kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_GAPS_WRAPPER_COPY_PLUGIN)};
  INFO(st.describe());
  CHECK(st.code() == KVC_ERR_ALREADY_EXISTS);
  CHECK(kvt::contains(st.message(), "'gaps_wrapper'"));
  CHECK(kvt::contains(st.message(), KVC_TEST_GAPS_WRAPPER_PLUGIN));
  CHECK(kvt::contains(st.message(), KVC_TEST_GAPS_WRAPPER_COPY_PLUGIN));
  CHECK(kvc_context_plugin_count(ctx.get()) == before);
}

TEST_CASE("gaps: forwarded scorer parameters without a key are INVALID_ARGUMENT naming the index") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_GAPS_WRAPPER_PLUGIN));
  kvc_cache_params p = small_params();
  p.policy = "gaps_wrapper";
  p.budget = 2;
  kvc_cache* cache = nullptr;
  kvt::Status st{kvc_cache_create(ctx.get(), &p, &cache)};
  INFO(st.describe());
  CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(st.message(), "'gaps_wrapper'"));
  CHECK(kvt::contains(st.message(), "scorer parameter 1"));
  CHECK(cache == nullptr);
  // The caller's own parameters: the index is named as well.
  const kvc_key_value params[2] = {{"window", "4"}, {nullptr, "1"}};
  p.policy = "snapkv";
  p.policy_params = params;
  p.n_policy_params = 2;
  kvt::Status own{kvc_cache_create(ctx.get(), &p, &cache)};
  INFO(own.describe());
  CHECK(own.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(own.message(), "policy_params[1]"));
  CHECK(cache == nullptr);
}

TEST_CASE("gaps: enum values no enumerator has are refused where they come in") {
  SUBCASE("the logger's minimum level") {
    kvt::ContextPtr ctx = kvt::make_context();
    Captured first, second;
    kvc_context_set_logger(ctx.get(), capture, &first, KVC_LOG_DEBUG);
    for (int level : {-1, 5, 99}) {
      CAPTURE(level);
      kvt_set_logger_raw(ctx.get(), capture, &second, level);
      CHECK(first.has("min_level " + std::to_string(level)));
    }
    // Each refused call left the first logger in place and told it why.
    CHECK(first.messages.size() == 3);
    CHECK(second.messages.empty());
  }
  SUBCASE("a plugin's log level and descriptor kind") {
    kvt::ContextPtr ctx = kvt::make_context();
    Captured log;
    kvc_context_set_logger(ctx.get(), capture, &log, KVC_LOG_DEBUG);
    const size_t before = kvc_context_plugin_count(ctx.get());
    kvt::Status st{kvc_context_load_plugin(ctx.get(), KVC_TEST_GAPS_BAD_ENUMS_PLUGIN)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_PLUGIN);
    CHECK(kvt::contains(st.message(), "unknown kind 7"));
    CHECK(kvc_context_plugin_count(ctx.get()) == before);
    CHECK(log.has("level 99"));
    CHECK(log.has("gaps: a message at level 99"));
  }
  SUBCASE("names and sizes") {
    for (int raw : {-1, 11, 999}) CHECK(std::string(kvt_status_code_name_raw(raw)) == "UNKNOWN");
    for (int raw : {-1, KVC_FORMAT_CODE_END, 999}) {
      CHECK(kvt_dtype_size_raw(raw) == 0);
      CHECK(std::string(kvt_dtype_name_raw(raw)) == "unknown");
    }
  }
  SUBCASE("fields of kvc_cache_params and the stat kind") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache* cache = nullptr;
    kvc_cache_params p = small_params();
    p.policy = "h2o";
    p.budget = 4;
    set_raw(&p.prefill, 3);
    kvt::Status st{kvc_cache_create(ctx.get(), &p, &cache)};
    CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(kvt::contains(st.message(), "prefill"));
    p.prefill = KVC_PREFILL_NONE;
    kvt::CachePtr owner = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(owner.get(), 0));
    REQUIRE(append(owner.get(), 0, {0, 1}).ok());
    const float values[2] = {1.0f, 2.0f};
    for (int raw : {0, 3, 8, -1}) {
      CAPTURE(raw);
      KVT_CHECK_ERR(kvt_report_stats_raw(owner.get(), 0, 0, 0, raw, values, 2),
                    KVC_ERR_INVALID_ARGUMENT);
    }
  }
}
