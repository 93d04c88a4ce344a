// Context, cache and sequence handling through the C API: versions, statuses, parameter
// validation, YAML, and the rule that a failing call leaves out-parameters and the cache as
// they were.
#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

kvc_cache* const kCacheSentinel = reinterpret_cast<kvc_cache*>(static_cast<uintptr_t>(0xC0FFEE0));
kvc_context* const kContextSentinel =
    reinterpret_cast<kvc_context*>(static_cast<uintptr_t>(0xBADC0DE0));

// Creating a cache with these params fails with `code`; the out-param stays the sentinel.
void check_create_fails(kvc_context* ctx, const kvc_cache_params& p, kvc_status_code code,
                        const char* what) {
  INFO(what);
  kvc_cache* cache = kCacheSentinel;
  KVT_CHECK_ERR(kvc_cache_create(ctx, &p, &cache), code);
  CHECK(cache == kCacheSentinel);
}

kvc_cache_params small_params() {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = 2;
  p.q_heads = 4;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F16;
  p.block_tokens = 4;
  return p;
}

// Stores an integer that is not one of the enum's values into an enum field, as a C caller
// may. (Converting such a value to the enum type in C++ would be undefined behaviour in the
// test itself; an unknown enum value reaching the C API is tested from C in c_api_only.c.)
template <typename E>
void set_raw(E* field, int value) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  std::memcpy(field, &value, sizeof value);
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / name;
  std::ofstream f(path);
  f << text;
  return path;
}

}  // namespace

TEST_CASE("context: version") {
  CHECK(kvc_version() == static_cast<uint32_t>(KVC_VERSION_NUMBER));
  char expect[64];
  std::snprintf(expect, sizeof expect, "%d.%d.%d", KVC_VERSION_MAJOR, KVC_VERSION_MINOR,
                KVC_VERSION_PATCH);
  REQUIRE(kvc_version_string() != nullptr);
  CHECK(std::string(kvc_version_string()) == expect);
  CHECK(KVC_VERSION_NUMBER == KVC_VERSION_MAJOR * 10000 + KVC_VERSION_MINOR * 100 + KVC_VERSION_PATCH);
}

TEST_CASE("context: statuses") {
  CHECK(kvc_status_get_code(nullptr) == KVC_OK);
  REQUIRE(kvc_status_message(nullptr) != nullptr);
  CHECK(std::string(kvc_status_message(nullptr)).empty());
  kvc_status_free(nullptr);
  CHECK(std::string(kvc_status_code_name(KVC_OK)) == "OK");
  CHECK(std::string(kvc_status_code_name(KVC_ERR_OUT_OF_MEMORY)) == "OUT_OF_MEMORY");
  CHECK(std::string(kvc_status_code_name(KVC_ERR_INVALID_ARGUMENT)) == "INVALID_ARGUMENT");
  std::set<std::string> names;
  for (int c = KVC_OK; c <= KVC_ERR_IO; ++c) {
    const char* n = kvc_status_code_name(static_cast<kvc_status_code>(c));
    REQUIRE(n != nullptr);
    CHECK(*n != '\0');
    names.insert(n);
  }
  CHECK(names.size() == static_cast<size_t>(KVC_ERR_IO + 1));
  // A real error status carries its code and message.
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr owner = kvt::make_cache(ctx.get(), small_params());
  kvc_cache* cache = owner.get();
  KVT_REQUIRE_OK(kvc_seq_create(cache, 3));
  kvc_status* st = kvc_seq_create(cache, 3);
  REQUIRE(st != nullptr);
  CHECK(kvc_status_get_code(st) == KVC_ERR_ALREADY_EXISTS);
  CHECK(std::string(kvc_status_message(st)).find('3') != std::string::npos);
  kvc_status_free(st);
}

TEST_CASE("context: destroy functions accept NULL; NULL handles are refused") {
  kvc_context_destroy(nullptr);
  kvc_cache_destroy(nullptr);
  kvc_context_set_logger(nullptr, nullptr, nullptr, KVC_LOG_INFO);  // must not crash
  KVT_CHECK_ERR(kvc_context_create(nullptr, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_context_create_from_file(nullptr, nullptr), KVC_ERR_INVALID_ARGUMENT);
  {
    kvc_context* ctx = kContextSentinel;
    KVT_CHECK_ERR(kvc_context_create_from_file(nullptr, &ctx), KVC_ERR_INVALID_ARGUMENT);
    CHECK(ctx == kContextSentinel);
  }
  kvc_cache_params p = small_params();
  kvc_cache* cache = kCacheSentinel;
  KVT_CHECK_ERR(kvc_cache_create(nullptr, &p, &cache), KVC_ERR_INVALID_ARGUMENT);
  CHECK(cache == kCacheSentinel);
  KVT_CHECK_ERR(kvc_cache_create_from_yaml(nullptr, "cache: {layers: 1}", &cache),
                KVC_ERR_INVALID_ARGUMENT);
  CHECK(cache == kCacheSentinel);
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_CHECK_ERR(kvc_cache_create(ctx.get(), nullptr, &cache), KVC_ERR_INVALID_ARGUMENT);
  CHECK(cache == kCacheSentinel);
  KVT_CHECK_ERR(kvc_cache_create(ctx.get(), &p, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_cache_create_from_yaml(ctx.get(), nullptr, nullptr), KVC_ERR_INVALID_ARGUMENT);

  kvc_cache_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  KVT_CHECK_ERR(kvc_cache_get_stats(nullptr, &stats), KVC_ERR_INVALID_ARGUMENT);
  kvc_cache_params out_params = p;
  KVT_CHECK_ERR(kvc_cache_get_params(nullptr, &out_params), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_create(nullptr, 0), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_remove(nullptr, 0), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_reserve(nullptr, 0, 4), KVC_ERR_INVALID_ARGUMENT);
  int32_t len = -7;
  KVT_CHECK_ERR(kvc_seq_length(nullptr, 0, 0, 0, &len), KVC_ERR_INVALID_ARGUMENT);
  CHECK(len == -7);

  const int32_t seq = 0, n = 1, pos = 0;
  kvc_batch b;
  kvc_batch_init(&b, 1, &seq, &n, &pos);
  std::vector<float> buf(64, 0.5f);
  const kvc_tensor t = kvt::tensor(buf.data(), KVC_DTYPE_F32);
  kvc_tensor_mut o = kvt::tensor_mut(buf.data());
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  KVT_CHECK_ERR(kvc_append(nullptr, 0, &b, &t, &t), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_attend(nullptr, 0, &b, &t, &ap, &o), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_append_attend(nullptr, 0, &b, &t, &t, &t, &ap, &o), KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("context: init functions fill defaults and struct_size") {
  kvc_cache_params p;
  std::memset(&p, 0xAB, sizeof p);
  kvc_cache_params_init(&p);
  CHECK(p.struct_size == sizeof p);
  CHECK(p.layers == 1);
  CHECK(p.kv_heads == 1);
  CHECK(p.q_heads == 0);  // as many as kv_heads
  CHECK(p.head_dim == 64);
  CHECK(p.dtype == KVC_DTYPE_F16);
  CHECK(p.layout == KVC_LAYOUT_PAGED);
  CHECK(p.block_tokens == 16);
  CHECK(p.growth_factor == 2.0);
  CHECK(p.memory_limit == (size_t{1} << 30));
  CHECK(p.backend == nullptr);

  kvc_attention_params a;
  std::memset(&a, 0xAB, sizeof a);
  kvc_attention_params_init(&a);
  CHECK(a.struct_size == sizeof a);
  CHECK(a.scale == 0.0f);
  CHECK(a.sliding_window == 0);
  CHECK(a.softcap == 0.0f);

  const int32_t ids[2] = {4, 5}, n[2] = {1, 2}, pos[3] = {0, 0, 1};
  kvc_batch b;
  std::memset(&b, 0xAB, sizeof b);
  kvc_batch_init(&b, 2, ids, n, pos);
  CHECK(b.struct_size == sizeof b);
  CHECK(b.n_seqs == 2);
  CHECK(b.seq_ids == ids);
  CHECK(b.n_tokens == n);
  CHECK(b.positions == pos);
}

TEST_CASE("context: dtype sizes and names") {
  CHECK(kvc_dtype_size(KVC_DTYPE_F32) == 4);
  CHECK(kvc_dtype_size(KVC_DTYPE_F16) == 2);
  CHECK(kvc_dtype_size(KVC_DTYPE_BF16) == 2);
  CHECK(std::string(kvc_dtype_name(KVC_DTYPE_F32)) == "f32");
  CHECK(std::string(kvc_dtype_name(KVC_DTYPE_F16)) == "f16");
  CHECK(std::string(kvc_dtype_name(KVC_DTYPE_BF16)) == "bf16");
  for (int raw : {-1, KVC_FORMAT_CODE_END, 999}) {
    CAPTURE(raw);
    kvc_dtype unknown;
    set_raw(&unknown, raw);
    CHECK(kvc_dtype_size(unknown) == 0);
    CHECK(std::string(kvc_dtype_name(unknown)) == "unknown");
  }
}

TEST_CASE("context: stats and policy info init functions") {
  kvc_cache_stats s;
  std::memset(&s, 0xAB, sizeof s);
  kvc_cache_stats_init(&s);
  CHECK(s.struct_size == sizeof s);
  CHECK(s.bytes_used == 0);
  CHECK(s.tokens_stored == 0);
  CHECK(s.sequences == 0);

  kvc_policy_info i;
  std::memset(&i, 0xAB, sizeof i);
  kvc_policy_info_init(&i);
  CHECK(i.struct_size == sizeof i);
  CHECK(i.name == nullptr);
  CHECK(i.budget_tokens == 0);
  CHECK(i.stats == 0);
  CHECK(i.observation_window == 0);

  kvc_cache_stats_init(nullptr);
  kvc_policy_info_init(nullptr);
}

TEST_CASE("cache: policy info gives the policy's effective parameters") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = small_params();

  SUBCASE("defaults of the policy are applied") {
    const kvc_key_value params[] = {{"window", "8"}};
    p.policy = "snapkv";
    p.budget = 40;
    p.policy_params = params;
    p.n_policy_params = 1;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    KVT_REQUIRE_OK(kvc_cache_policy_info(cache.get(), &info));
    CHECK(std::string(info.name) == "snapkv");
    CHECK(info.sinks == 0);
    CHECK(info.recent == 8);
    CHECK(info.budget_tokens == 40);
    CHECK(info.budget_ratio == 0.0);
    CHECK(info.stats == KVC_STAT_KIND_ATTN_WINDOW);
    CHECK(info.observation_window == 8);
  }
  SUBCASE("given sinks, recent and a ratio win") {
    p.policy = "streaming";
    p.budget_ratio = 0.5;
    p.sinks = 2;
    p.recent = 3;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    KVT_REQUIRE_OK(kvc_cache_policy_info(cache.get(), &info));
    CHECK(std::string(info.name) == "streaming");
    CHECK(info.sinks == 2);
    CHECK(info.recent == 3);
    CHECK(info.budget_tokens == 0);
    CHECK(info.budget_ratio == 0.5);
    CHECK(info.stats == 0);
  }
  SUBCASE("a wrapper reports its scorer's statistics") {
    p.policy = "pyramidkv";
    p.budget = 64;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    KVT_REQUIRE_OK(kvc_cache_policy_info(cache.get(), &info));
    CHECK(std::string(info.name) == "pyramidkv");
    CHECK(info.stats == KVC_STAT_KIND_ATTN_WINDOW);
    CHECK(info.observation_window == 32);
    CHECK(info.recent == 32);
  }
  SUBCASE("from YAML") {
    kvc_cache* raw = nullptr;
    KVT_REQUIRE_OK(kvc_cache_create_from_yaml(
        ctx.get(), "cache: { layers: 1 }\npolicy: { name: streaming, budget: 16 }\n", &raw));
    kvt::CachePtr cache(raw);
    kvc_policy_info info;
    kvc_policy_info_init(&info);
    KVT_REQUIRE_OK(kvc_cache_policy_info(cache.get(), &info));
    CHECK(std::string(info.name) == "streaming");
    CHECK(info.sinks == 4);
    CHECK(info.recent == 0);
    CHECK(info.budget_tokens == 16);
  }
}

TEST_CASE("cache: policy info misuse changes nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = small_params();
  kvt::CachePtr plain = kvt::make_cache(ctx.get(), p);
  p.policy = "window";
  p.budget = 8;
  kvt::CachePtr with_policy = kvt::make_cache(ctx.get(), p);

  kvc_policy_info info;
  std::memset(&info, 0x5A, sizeof info);
  info.struct_size = sizeof info;
  kvc_policy_info before = info;
  KVT_CHECK_ERR(kvc_cache_policy_info(plain.get(), &info), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_cache_policy_info(nullptr, &info), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_cache_policy_info(with_policy.get(), nullptr), KVC_ERR_INVALID_ARGUMENT);
  CHECK(std::memcmp(&info, &before, sizeof info) == 0);

  info.struct_size = 0;
  before = info;
  KVT_CHECK_ERR(kvc_cache_policy_info(with_policy.get(), &info), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_cache_policy_info(plain.get(), &info), KVC_ERR_INVALID_ARGUMENT);
  CHECK(std::memcmp(&info, &before, sizeof info) == 0);

  // An older caller's smaller struct is written no further than its struct_size.
  info.struct_size = offsetof(kvc_policy_info, recent);
  before = info;
  KVT_REQUIRE_OK(kvc_cache_policy_info(with_policy.get(), &info));
  CHECK(info.struct_size == offsetof(kvc_policy_info, recent));
  CHECK(std::string(info.name) == "window");
  CHECK(info.sinks == 0);
  CHECK(std::memcmp(reinterpret_cast<const char*>(&info) + offsetof(kvc_policy_info, recent),
                    reinterpret_cast<const char*>(&before) + offsetof(kvc_policy_info, recent),
                    sizeof info - offsetof(kvc_policy_info, recent)) == 0);
}

TEST_CASE("context: YAML errors are CONFIG errors naming the key and line") {
  SUBCASE("unknown key") {
    kvc_context* ctx = kContextSentinel;
    kvt::Status st{kvc_context_create("threads: 1\ncache:\n  layers: 2\n  bogus_key: 3\n", &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "bogus_key"));
    CHECK(kvt::contains(st.message(), ":4:"));
    CHECK(ctx == kContextSentinel);
  }
  SUBCASE("wrong type") {
    kvc_context* ctx = kContextSentinel;
    kvt::Status st{kvc_context_create("cache:\n  head_dim: abc\n", &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "head_dim"));
    CHECK(kvt::contains(st.message(), ":2:"));
    CHECK(ctx == kContextSentinel);
  }
  SUBCASE("malformed") {
    kvc_context* ctx = kContextSentinel;
    kvt::Status st{kvc_context_create("cache: [1, 2\nthreads: {\n", &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(!st.message().empty());
    CHECK(ctx == kContextSentinel);
  }
  SUBCASE("bad key in a cache created from YAML") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache* cache = kCacheSentinel;
    kvt::Status st{kvc_cache_create_from_yaml(ctx.get(), "cache:\n  layers: 2\n  kv_heads: 2\n  hed_dim: 8\n", &cache)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "hed_dim"));
    CHECK(kvt::contains(st.message(), ":4:"));
    CHECK(cache == kCacheSentinel);
  }
  SUBCASE("impossible value in a cache created from YAML") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache* cache = kCacheSentinel;
    kvt::Status st{kvc_cache_create_from_yaml(ctx.get(), "cache:\n  kv_heads: 3\n  q_heads: 4\n", &cache)};
    INFO(st.describe());
    CHECK((st.code() == KVC_ERR_CONFIG || st.code() == KVC_ERR_INVALID_ARGUMENT));
    CHECK(cache == kCacheSentinel);
  }
}

// yaml-cpp 0.7.0 once made both calls allocate without end on a ',' where a value starts.
TEST_CASE("context: a ',' where a YAML document's value should start is refused, not a hang") {
  kvt::ContextPtr good = kvt::make_context();
  for (const char* yaml : {",", ",a: 1", "---\n,\n", "cache: {}\n...\n,\n", "&a ,"}) {
    CAPTURE(yaml);
    kvc_context* ctx = kContextSentinel;
    kvt::Status context_st{kvc_context_create(yaml, &ctx)};
    CHECK(context_st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(context_st.message(), "YAML syntax error: unexpected ','"));
    CHECK(ctx == kContextSentinel);
    kvc_cache* cache = kCacheSentinel;
    kvt::Status cache_st{kvc_cache_create_from_yaml(good.get(), yaml, &cache)};
    CHECK(cache_st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(cache_st.message(), "<cache yaml>:"));
    CHECK(kvt::contains(cache_st.message(), "YAML syntax error: unexpected ','"));
    CHECK(cache == kCacheSentinel);
  }
}

TEST_CASE("context: from a file") {
  const std::filesystem::path good = write_temp("kvc_test_good.yaml", "threads: 2\ncache:\n  layers: 3\n  head_dim: 16\n");
  const std::filesystem::path bad = write_temp("kvc_test_bad.yaml", "threads: 2\ncache:\n  nonsense: 3\n");
  {
    kvc_context* ctx = nullptr;
    KVT_REQUIRE_OK(kvc_context_create_from_file(good.string().c_str(), &ctx));
    kvt::ContextPtr owner(ctx);
    kvc_cache* cache = nullptr;
    KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx, nullptr, &cache));
    kvt::CachePtr cowner(cache);
    kvc_cache_params p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    KVT_REQUIRE_OK(kvc_cache_get_params(cache, &p));
    CHECK(p.layers == 3);
    CHECK(p.head_dim == 16);
    CHECK(p.kv_heads == 1);  // default
  }
  {
    kvc_context* ctx = kContextSentinel;
    kvt::Status st{kvc_context_create_from_file(bad.string().c_str(), &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_CONFIG);
    CHECK(kvt::contains(st.message(), "nonsense"));
    CHECK(kvt::contains(st.message(), ":3:"));
    CHECK(kvt::contains(st.message(), bad.filename().string()));
    CHECK(ctx == kContextSentinel);
  }
  {
    const std::string missing = (std::filesystem::temp_directory_path() / "kvc_no_such_file.yaml").string();
    kvc_context* ctx = kContextSentinel;
    kvt::Status st{kvc_context_create_from_file(missing.c_str(), &ctx)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_NOT_FOUND);
    CHECK(kvt::contains(st.message(), missing));
    CHECK(ctx == kContextSentinel);
  }
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST_CASE("cache: created from YAML with a cache section") {
  kvt::ContextPtr ctx = kvt::make_context();
  const char* yaml =
      "backend: cpu\n"
      "cache:\n"
      "  layers: 4\n"
      "  kv_heads: 2\n"
      "  q_heads: 8\n"
      "  head_dim: 32\n"
      "  dtype: bf16\n"
      "  layout: contiguous\n"
      "  growth_factor: 1.5\n"
      "  memory_limit: 3MiB\n";
  kvc_cache* cache = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx.get(), yaml, &cache));
  kvt::CachePtr owner(cache);
  kvc_cache_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  KVT_REQUIRE_OK(kvc_cache_get_params(cache, &p));
  CHECK(p.layers == 4);
  CHECK(p.kv_heads == 2);
  CHECK(p.q_heads == 8);
  CHECK(p.head_dim == 32);
  CHECK(p.dtype == KVC_DTYPE_BF16);
  CHECK(p.layout == KVC_LAYOUT_CONTIGUOUS);
  CHECK(p.growth_factor == 1.5);
  CHECK(p.memory_limit == 3u * 1024u * 1024u);
  REQUIRE(p.backend != nullptr);
  CHECK(std::string(p.backend) == "cpu");
  const kvc_cache_stats s = kvt::get_stats(cache);
  CHECK(s.bytes_limit == 3u * 1024u * 1024u);

  // It works: store and attend (bf16 storage, f32 inputs).
  KVT_REQUIRE_OK(kvc_seq_create(cache, 0));
  const int32_t seq = 0, n = 3, pos[3] = {0, 1, 2};
  kvc_batch b;
  kvc_batch_init(&b, 1, &seq, &n, pos);
  ref::Rng rng(3);
  std::vector<float> k = rng.vec(3 * 64), v = rng.vec(3 * 64), q = rng.vec(3 * 256), out(3 * 256);
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32), vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  kvc_tensor_mut ot = kvt::tensor_mut(out.data());
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  KVT_REQUIRE_OK(kvc_append_attend(cache, 3, &b, &qt, &kt, &vt, &ap, &ot));
  ref::History h(2, 32);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> kr(64), vr(64);
    for (int e = 0; e < 64; ++e) {
      kr[e] = ref::round_to_dtype(k[i * 64 + e], KVC_DTYPE_BF16);
      vr[e] = ref::round_to_dtype(v[i * 64 + e], KVC_DTYPE_BF16);
    }
    h.append(i, kr.data(), vr.data());
  }
  std::vector<double> expect(256);
  double err = 0;
  for (int i = 0; i < 3; ++i) {
    ref::attend(h, 8, &q[i * 256], i, ref::Options{}, expect.data());
    for (int e = 0; e < 256; ++e) err = std::max(err, std::fabs(out[i * 256 + e] - expect[e]));
  }
  CHECK(err <= 2e-3);
}

TEST_CASE("cache: NULL YAML uses the context's own cache section") {
  kvt::ContextPtr ctx = kvt::make_context("cache:\n  layers: 5\n  kv_heads: 4\n  q_heads: 4\n  dtype: f32\n  layout: paged\n  block_tokens: 8\n");
  kvc_cache* cache = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx.get(), nullptr, &cache));
  kvt::CachePtr owner(cache);
  kvc_cache_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  KVT_REQUIRE_OK(kvc_cache_get_params(cache, &p));
  CHECK(p.layers == 5);
  CHECK(p.kv_heads == 4);
  CHECK(p.q_heads == 4);
  CHECK(p.dtype == KVC_DTYPE_F32);
  CHECK(p.layout == KVC_LAYOUT_PAGED);
  CHECK(p.block_tokens == 8);
  CHECK(p.head_dim == 64);
}

TEST_CASE("cache: invalid parameters are refused") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = small_params();
  {
    kvc_cache_params q = p;
    q.q_heads = 6;
    q.kv_heads = 4;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "q_heads 6, kv_heads 4");
  }
  {
    kvc_cache_params q = p;
    q.q_heads = 2;
    q.kv_heads = 4;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "q_heads < kv_heads");
  }
  for (int32_t bad : {0, -1}) {
    kvc_cache_params q = p;
    q.layers = bad;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "layers <= 0");
    q = p;
    q.kv_heads = bad;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "kv_heads <= 0");
    q = p;
    q.q_heads = bad - 1;  // 0 is the default: as many as kv_heads
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "q_heads < 0");
    q = p;
    q.head_dim = bad;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "head_dim <= 0");
    q = p;
    q.block_tokens = bad;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "paged block_tokens <= 0");
  }
  {
    kvc_cache_params q = p;
    q.layout = KVC_LAYOUT_CONTIGUOUS;
    q.growth_factor = 1.0;
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "contiguous growth_factor 1");
  }
  {
    kvc_cache_params q = p;
    set_raw(&q.dtype, 17);
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "dtype 17");
  }
  {
    kvc_cache_params q = p;
    set_raw(&q.layout, 9);
    check_create_fails(ctx.get(), q, KVC_ERR_INVALID_ARGUMENT, "layout 9");
  }
  {
    kvc_cache_params q = p;
    q.backend = "no_such_backend";
    INFO("unknown backend");
    kvc_cache* cache = kCacheSentinel;
    kvt::Status st{kvc_cache_create(ctx.get(), &q, &cache)};
    INFO(st.describe());
    CHECK(st.code() == KVC_ERR_NOT_FOUND);
    CHECK(kvt::contains(st.message(), "no_such_backend"));
    CHECK(cache == kCacheSentinel);
  }
}

TEST_CASE("cache: parameters from C and from YAML get the same defaults") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.kv_heads = 8;  // q_heads left at its default
  kvt::CachePtr from_c = kvt::make_cache(ctx.get(), p);
  kvc_cache* raw = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx.get(), "cache:\n  kv_heads: 8\n", &raw));
  kvt::CachePtr from_yaml(raw);
  for (kvc_cache* cache : {from_c.get(), from_yaml.get()}) {
    kvc_cache_params got;
    kvc_cache_params_init(&got);
    KVT_REQUIRE_OK(kvc_cache_get_params(cache, &got));
    CHECK(got.kv_heads == 8);
    CHECK(got.q_heads == 8);
  }
}

TEST_CASE("cache: parameters from C and from YAML are refused with the same message") {
  kvt::ContextPtr ctx = kvt::make_context();
  struct Bad {
    const char* yaml;  // one cache key, on line 2
    void (*set)(kvc_cache_params&);
  };
  const Bad cases[] = {
      {"  layers: 0\n", [](kvc_cache_params& p) { p.layers = 0; }},
      {"  kv_heads: -2\n", [](kvc_cache_params& p) { p.kv_heads = -2; }},
      {"  q_heads: 3\n", [](kvc_cache_params& p) { p.q_heads = 3; p.kv_heads = 2; }},
      {"  head_dim: 2048\n", [](kvc_cache_params& p) { p.head_dim = 2048; }},
      {"  block_tokens: 0\n", [](kvc_cache_params& p) { p.block_tokens = 0; }},
      {"  growth_factor: 1\n", [](kvc_cache_params& p) { p.growth_factor = 1.0; }},
      {"  growth_factor: 1e10\n", [](kvc_cache_params& p) { p.growth_factor = 1e10; }},
      {"  layers: 4097\n", [](kvc_cache_params& p) { p.layers = 4097; }},
      {"  kv_heads: 4097\n", [](kvc_cache_params& p) { p.kv_heads = 4097; }},
      {"  memory_limit: 0\n", [](kvc_cache_params& p) { p.memory_limit = 0; }},
  };
  for (const Bad& bad : cases) {
    std::string yaml = std::string("cache:\n") + bad.yaml;
    if (std::string(bad.yaml).find("q_heads") != std::string::npos) yaml += "  kv_heads: 2\n";
    CAPTURE(yaml);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    bad.set(p);
    kvc_cache* cache = kCacheSentinel;
    kvt::Status from_c{kvc_cache_create(ctx.get(), &p, &cache)};
    kvt::Status from_yaml{kvc_cache_create_from_yaml(ctx.get(), yaml.c_str(), &cache)};
    CHECK(cache == kCacheSentinel);
    CHECK(from_c.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(from_yaml.code() == KVC_ERR_CONFIG);
    REQUIRE(!from_c.message().empty());
    // YAML adds where: "<cache yaml>:2: cache.<key>: " then the same words.
    const std::string key = std::string(bad.yaml).substr(2, std::string(bad.yaml).find(':') - 2);
    CHECK(from_yaml.message() == "<cache yaml>:2: cache." + key + ": " + from_c.message());
    CHECK(kvt::contains(from_c.message(), key + " must be"));
  }
}

TEST_CASE("cache: layers x kv_heads is bounded, and so is an empty sequence's bookkeeping") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1024;
  p.kv_heads = 256;
  p.memory_limit = size_t{1} << 20;
  kvc_cache* cache = kCacheSentinel;
  kvt::Status st{kvc_cache_create(ctx.get(), &p, &cache)};
  CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(st.message() ==
        "kv_heads must be at most 64 for 1024 layers (layers x kv_heads at most 65536), got 256");
  CHECK(cache == kCacheSentinel);
}

TEST_CASE("cache: struct_size of older callers") {
  kvt::ContextPtr ctx = kvt::make_context();
  // A caller compiled before `backend` existed: whatever lies there is not read.
  kvc_cache_params p = small_params();
  p.backend = reinterpret_cast<const char*>(static_cast<uintptr_t>(0x10));
  p.struct_size = static_cast<uint32_t>(offsetof(kvc_cache_params, backend));
  kvc_cache* cache = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create(ctx.get(), &p, &cache));
  kvt::CachePtr owner(cache);

  // Out-structs are written only up to the caller's struct_size.
  unsigned char raw[sizeof(kvc_cache_stats)];
  std::memset(raw, 0xEE, sizeof raw);
  const uint32_t stats_size = static_cast<uint32_t>(offsetof(kvc_cache_stats, bytes_limit));
  std::memcpy(raw, &stats_size, sizeof stats_size);
  KVT_REQUIRE_OK(kvc_cache_get_stats(cache, reinterpret_cast<kvc_cache_stats*>(raw)));
  bool untouched = true;
  for (size_t i = stats_size; i < sizeof raw; ++i) untouched = untouched && raw[i] == 0xEE;
  CHECK_MESSAGE(untouched, "kvc_cache_get_stats wrote past the caller's struct_size");
  CHECK(reinterpret_cast<kvc_cache_stats*>(raw)->bytes_used == 0);

  unsigned char rawp[sizeof(kvc_cache_params)];
  std::memset(rawp, 0xEE, sizeof rawp);
  const uint32_t params_size = static_cast<uint32_t>(offsetof(kvc_cache_params, layout));
  std::memcpy(rawp, &params_size, sizeof params_size);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache, reinterpret_cast<kvc_cache_params*>(rawp)));
  untouched = true;
  for (size_t i = params_size; i < sizeof rawp; ++i) untouched = untouched && rawp[i] == 0xEE;
  CHECK_MESSAGE(untouched, "kvc_cache_get_params wrote past the caller's struct_size");
  CHECK(reinterpret_cast<kvc_cache_params*>(rawp)->head_dim == 8);
}

TEST_CASE("cache: sequence errors") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), small_params());
  kvc_cache* c = cache.get();
  KVT_CHECK_ERR(kvc_seq_create(c, -1), KVC_ERR_INVALID_ARGUMENT);
  KVT_REQUIRE_OK(kvc_seq_create(c, 0));
  KVT_REQUIRE_OK(kvc_seq_create(c, 1000000));
  KVT_CHECK_ERR(kvc_seq_create(c, 0), KVC_ERR_ALREADY_EXISTS);
  KVT_CHECK_ERR(kvc_seq_remove(c, 1), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_reserve(c, 1, 10), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_reserve(c, 0, -1), KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::get_stats(c).sequences == 2);

  int32_t len = -7;
  KVT_CHECK_ERR(kvc_seq_length(c, 1, 0, 0, &len), KVC_ERR_NOT_FOUND);
  KVT_CHECK_ERR(kvc_seq_length(c, 0, -1, 0, &len), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_length(c, 0, 2, 0, &len), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_length(c, 0, 0, -1, &len), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_seq_length(c, 0, 0, 2, &len), KVC_ERR_INVALID_ARGUMENT);
  CHECK(len == -7);
  KVT_CHECK_ERR(kvc_seq_length(c, 0, 0, 0, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_REQUIRE_OK(kvc_seq_length(c, 0, 1, 1, &len));
  CHECK(len == 0);

  // A removed id is free again.
  KVT_REQUIRE_OK(kvc_seq_remove(c, 0));
  KVT_CHECK_ERR(kvc_seq_remove(c, 0), KVC_ERR_NOT_FOUND);
  KVT_CHECK_OK(kvc_seq_create(c, 0));
  CHECK(kvt::get_stats(c).sequences == 2);
}

TEST_CASE("cache: data path errors change nothing") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), small_params());  // f16 storage, 2 layers
  kvc_cache* c = cache.get();
  KVT_REQUIRE_OK(kvc_seq_create(c, 0));
  KVT_REQUIRE_OK(kvc_seq_create(c, 1));
  ref::Rng rng(11);
  // 3 tokens in seq 0 on layer 0.
  {
    const int32_t seq = 0, n = 3, pos[3] = {0, 1, 2};
    kvc_batch b;
    kvc_batch_init(&b, 1, &seq, &n, pos);
    std::vector<float> k = rng.vec(3 * 16), v = rng.vec(3 * 16);
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32), vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    KVT_REQUIRE_OK(kvc_append(c, 0, &b, &kt, &vt));
  }
  kvc_cache_stats before = kvt::get_stats(c);

  // A valid two-sequence batch of 2 + 1 tokens, then one thing broken at a time.
  const int32_t ids[2] = {0, 1};
  const int32_t ntok[2] = {2, 1};
  const int32_t pos[3] = {3, 4, 0};
  std::vector<float> k = rng.vec(3 * 16), v = rng.vec(3 * 16), q = rng.vec(3 * 32);
  const std::vector<unsigned char> k_bf16 = ref::encode(k, KVC_DTYPE_BF16);
  const std::vector<unsigned char> q_bf16 = ref::encode(q, KVC_DTYPE_BF16);
  kvc_batch good;
  kvc_batch_init(&good, 2, ids, ntok, pos);
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  std::vector<float> out(3 * 32, 123.0f);
  kvc_tensor_mut ot = kvt::tensor_mut(out.data());
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);

  enum { APPEND = 1, ATTEND = 2, BOTH = 4, ALL = 7, KV = APPEND | BOTH, Q = ATTEND | BOTH };
  struct Case {
    const char* what;
    int which;
    int32_t layer;
    kvc_batch batch;
    kvc_tensor k, v, q;
    kvc_tensor_mut out;
    kvc_status_code code;
    kvc_status_code alt;  // another acceptable code
  };
  std::vector<Case> cases;
  cases.reserve(64);  // add() hands out pointers into the vector
  auto add = [&](const char* what, kvc_status_code code, int which = ALL) {
    cases.push_back({what, which, 0, good, kt, vt, qt, ot, code, code});
    return &cases.back();
  };
  add("layer -1", KVC_ERR_INVALID_ARGUMENT)->layer = -1;
  add("layer == layers", KVC_ERR_INVALID_ARGUMENT)->layer = 2;
  const int32_t unknown_ids[2] = {0, 7};
  add("unknown sequence (last in the batch)", KVC_ERR_NOT_FOUND)->batch.seq_ids = unknown_ids;
  const int32_t negative_ids[2] = {0, -3};
  {
    // A negative id is out of range, and no such sequence exists: either code will do.
    Case* cs = add("negative sequence id", KVC_ERR_INVALID_ARGUMENT);
    cs->batch.seq_ids = negative_ids;
    cs->alt = KVC_ERR_NOT_FOUND;
  }
  const int32_t zero_tokens[2] = {2, 0};
  add("n_tokens 0", KVC_ERR_INVALID_ARGUMENT)->batch.n_tokens = zero_tokens;
  const int32_t neg_tokens[2] = {-1, 1};
  add("n_tokens -1", KVC_ERR_INVALID_ARGUMENT)->batch.n_tokens = neg_tokens;
  add("n_seqs -1", KVC_ERR_INVALID_ARGUMENT)->batch.n_seqs = -1;
  add("NULL seq_ids", KVC_ERR_INVALID_ARGUMENT)->batch.seq_ids = nullptr;
  add("NULL n_tokens", KVC_ERR_INVALID_ARGUMENT)->batch.n_tokens = nullptr;
  add("NULL positions", KVC_ERR_INVALID_ARGUMENT)->batch.positions = nullptr;
  add("NULL k data", KVC_ERR_INVALID_ARGUMENT, KV)->k.data = nullptr;
  add("NULL v data", KVC_ERR_INVALID_ARGUMENT, KV)->v.data = nullptr;
  {
    Case* cs = add("k in bf16 (storage is f16)", KVC_ERR_INVALID_ARGUMENT, KV);
    cs->k.data = k_bf16.data();
    cs->k.dtype = KVC_DTYPE_BF16;
  }
  set_raw(&add("v dtype 42", KVC_ERR_INVALID_ARGUMENT, KV)->v.dtype, 42);
  add("k row_stride smaller than a row", KVC_ERR_INVALID_ARGUMENT, KV)->k.row_stride = 8;
  set_raw(&add("k device 5", KVC_ERR_INVALID_ARGUMENT, KV)->k.device, 5);
  {
    Case* cs = add("q in bf16 (storage is f16)", KVC_ERR_INVALID_ARGUMENT, Q);
    cs->q.data = q_bf16.data();
    cs->q.dtype = KVC_DTYPE_BF16;
  }
  add("NULL q data", KVC_ERR_INVALID_ARGUMENT, Q)->q.data = nullptr;
  add("out dtype f16", KVC_ERR_INVALID_ARGUMENT, Q)->out.dtype = KVC_DTYPE_F16;
  add("NULL out data", KVC_ERR_INVALID_ARGUMENT, Q)->out.data = nullptr;
  add("q row_stride smaller than a row", KVC_ERR_INVALID_ARGUMENT, Q)->q.row_stride = 31;

  auto check_nothing_changed = [&](const std::string& what) {
    INFO(what);
    const kvc_cache_stats now = kvt::get_stats(c);
    INFO("before " << kvt::stats_string(before) << "\nnow " << kvt::stats_string(now));
    CHECK(kvt::stats_equal(before, now));
    before = now;  // report each call that changes something once, not every call after it
    for (int layer = 0; layer < 2; ++layer)
      for (int h = 0; h < 2; ++h) {
        CHECK(kvt::seq_length(c, 0, layer, h) == (layer == 0 ? 3 : 0));
        CHECK(kvt::seq_length(c, 1, layer, h) == 0);
      }
    bool untouched = true;
    for (float x : out) untouched = untouched && x == 123.0f;
    CHECK_MESSAGE(untouched, "the output was written although the call failed");
  };

  auto check_code = [](kvc_status* raw, const Case& cs, const char* call) {
    kvt::Status st{raw};
    INFO(call << ": " << cs.what << " returned " << st.describe());
    CHECK((st.code() == cs.code || st.code() == cs.alt));
    CHECK(!st.message().empty());
  };
  for (Case& cs : cases) {
    if (cs.which & APPEND) {
      check_code(kvc_append(c, cs.layer, &cs.batch, &cs.k, &cs.v), cs, "kvc_append");
      check_nothing_changed(std::string("kvc_append: ") + cs.what);
    }
    if (cs.which & ATTEND) {
      check_code(kvc_attend(c, cs.layer, &cs.batch, &cs.q, &ap, &cs.out), cs, "kvc_attend");
      check_nothing_changed(std::string("kvc_attend: ") + cs.what);
    }
    if (cs.which & BOTH) {
      check_code(kvc_append_attend(c, cs.layer, &cs.batch, &cs.q, &cs.k, &cs.v, &ap, &cs.out), cs,
                 "kvc_append_attend");
      check_nothing_changed(std::string("kvc_append_attend: ") + cs.what);
    }
  }
  KVT_CHECK_ERR(kvc_append(c, 0, nullptr, &kt, &vt), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_append(c, 0, &good, nullptr, &vt), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_append(c, 0, &good, &kt, nullptr), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_attend(c, 0, &good, nullptr, &ap, &ot), KVC_ERR_INVALID_ARGUMENT);
  KVT_CHECK_ERR(kvc_attend(c, 0, &good, &qt, &ap, nullptr), KVC_ERR_INVALID_ARGUMENT);
  check_nothing_changed("NULL tensors");

  // The unbroken batch works, in f32 and in the storage dtype.
  KVT_CHECK_OK(kvc_append_attend(c, 0, &good, &qt, &kt, &vt, &ap, &ot));
  CHECK(kvt::seq_length(c, 0, 0, 0) == 5);
  CHECK(kvt::seq_length(c, 1, 0, 1) == 1);
  const std::vector<unsigned char> k16 = ref::encode(k, KVC_DTYPE_F16), v16 = ref::encode(v, KVC_DTYPE_F16);
  const kvc_tensor k16t = kvt::tensor(k16.data(), KVC_DTYPE_F16), v16t = kvt::tensor(v16.data(), KVC_DTYPE_F16);
  const int32_t pos2[3] = {5, 6, 1};
  kvc_batch next;
  kvc_batch_init(&next, 2, ids, ntok, pos2);
  KVT_CHECK_OK(kvc_append(c, 1, &next, &k16t, &v16t));
  CHECK(kvt::seq_length(c, 0, 1, 0) == 2);
}

namespace {

struct LoggerSwap {
  kvc_context* ctx;
  int first = 0, second = 0;
};

void second_sink(void* user, kvc_log_level, const char*) { ++static_cast<LoggerSwap*>(user)->second; }

// Replaces itself on its first message.
void first_sink(void* user, kvc_log_level, const char*) {
  auto* swap = static_cast<LoggerSwap*>(user);
  if (swap->first++ == 0) kvc_context_set_logger(swap->ctx, second_sink, swap, KVC_LOG_DEBUG);
}

void make_and_drop_cache(kvc_context* ctx) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = 1;
  p.q_heads = 1;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F32;
  kvt::CachePtr cache = kvt::make_cache(ctx, p);
}

}  // namespace

// The callback ran with the logger's lock held, so this call never returned.
TEST_CASE("context: a log callback may set the logger") {
  kvt::ContextPtr ctx = kvt::make_context();
  LoggerSwap swap{ctx.get()};
  kvc_context_set_logger(ctx.get(), first_sink, &swap, KVC_LOG_DEBUG);
  make_and_drop_cache(ctx.get());  // logs the backend's kernels at debug level
  make_and_drop_cache(ctx.get());
  CHECK(swap.first == 1);
  CHECK(swap.second >= 1);
  kvc_context_set_logger(ctx.get(), nullptr, nullptr, KVC_LOG_WARN);
}

// Each sink's user_data is freed as soon as the logger moved on: under ASan a call into a
// replaced callback after kvc_context_set_logger returned would read freed memory.
TEST_CASE("context: after kvc_context_set_logger returns, the old callback is not running") {
  kvt::ContextPtr ctx = kvt::make_context();
  struct Sink {
    std::atomic<int> calls{0};
  };
  const kvc_log_fn count = [](void* user, kvc_log_level, const char*) {
    static_cast<Sink*>(user)->calls++;
  };
  auto* current = new Sink;
  kvc_context_set_logger(ctx.get(), count, current, KVC_LOG_DEBUG);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&] {
      while (!stop) make_and_drop_cache(ctx.get());
    });
  }
  // Until the old sinks have taken enough calls that some were surely in flight at a swap.
  int seen = 0;
  for (int swaps = 0; swaps < 200 || seen < 100; ++swaps) {
    auto* next = new Sink;
    kvc_context_set_logger(ctx.get(), count, next, KVC_LOG_DEBUG);
    seen += current->calls;
    delete current;
    current = next;
  }
  stop = true;
  for (std::thread& w : workers) w.join();
  kvc_context_set_logger(ctx.get(), nullptr, nullptr, KVC_LOG_WARN);
  delete current;
  CHECK(seen >= 100);
}
