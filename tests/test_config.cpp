#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cache_params.hpp"
#include "config.hpp"
#include "kvcache/kvcache_error.hpp"

namespace {

kvc::Config parse(const std::string& yaml) { return kvc::parse_config(yaml, "cfg"); }

// The message of the configuration error that parsing yaml raises ("" when it raises none).
std::string config_error(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_CONFIG);
    return e.what();
  }
  FAIL_CHECK("no error for:\n" << yaml);
  return "";
}

std::string byte_size_error(const std::string& text) {
  try {
    kvc::parse_byte_size(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL_CHECK("no error for '" << text << "'");
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

constexpr size_t kGiB = size_t{1} << 30;

}  // namespace

TEST_CASE("config: empty text, comments only and an explicit null give the defaults") {
  for (const char* yaml : {"", "# nothing here\n\n   # still nothing\n", "~\n", "---\n"}) {
    CAPTURE(yaml);
    const kvc::Config config = parse(yaml);
    const kvc::CacheConfig defaults = kvc::resolve_cache_config(kvc::CacheConfig{});
    CHECK(!config.threads);
    CHECK(config.plugin_paths.empty());
    CHECK_FALSE(config.policy.has_value());
    CHECK(config.cache.layers == defaults.layers);
    CHECK(config.cache.kv_heads == defaults.kv_heads);
    CHECK(config.cache.q_heads == defaults.q_heads);
    CHECK(config.cache.head_dim == defaults.head_dim);
    CHECK(config.cache.k_dtype == defaults.k_dtype);
    CHECK(config.cache.v_dtype == defaults.v_dtype);
    CHECK(config.cache.layout == defaults.layout);
    CHECK(config.cache.block_tokens == defaults.block_tokens);
    CHECK(config.cache.growth_factor == defaults.growth_factor);
    CHECK(config.cache.memory_limit == defaults.memory_limit);
    CHECK(config.cache.backend == defaults.backend);
  }
}

TEST_CASE("config: a full document is read back field by field") {
  const kvc::Config config = parse(R"(# a complete configuration
threads: 6
plugins: { paths: [/opt/kvc/plugins, ./libmy_policy.so] }
backend: cuda
cache:
  layers: 32
  kv_heads: 8
  q_heads: 32
  head_dim: 128
  dtype: bf16
  layout: contiguous
  block_tokens: 32
  growth_factor: 1.5
  memory_limit: 2GiB
policy:
  name: snapkv
  budget: 512
  sinks: 4
  recent: 32
  params: { window: 32, kernel: 5 }
  compress: { prefill: per_chunk, decode_every: 64, decode_slack: 8 }
)");
  CHECK(config.threads == 6);
  CHECK(config.plugin_paths == std::vector<std::string>{"/opt/kvc/plugins", "./libmy_policy.so"});
  CHECK(config.cache.backend == "cuda");
  CHECK(config.cache.layers == 32);
  CHECK(config.cache.kv_heads == 8);
  CHECK(config.cache.q_heads == 32);
  CHECK(config.cache.head_dim == 128);
  CHECK(config.cache.k_dtype == KVC_DTYPE_BF16);
  CHECK(config.cache.v_dtype == KVC_DTYPE_BF16);
  CHECK(config.cache.layout == KVC_LAYOUT_CONTIGUOUS);
  CHECK(config.cache.block_tokens == 32);
  CHECK(config.cache.growth_factor == 1.5);
  CHECK(config.cache.memory_limit == 2 * kGiB);
  REQUIRE(config.policy.has_value());
  const kvc::PolicyConfig& policy = *config.policy;
  CHECK(policy.name == "snapkv");
  CHECK(policy.budget_tokens == 512);
  CHECK(policy.budget_ratio == 0.0);
  CHECK(policy.sinks == 4);
  CHECK(policy.recent == 32);
  const std::vector<std::pair<std::string, std::string>> params{{"window", "32"}, {"kernel", "5"}};
  CHECK(policy.params == params);
  CHECK(policy.prefill == kvc::PrefillCompression::per_chunk);
  CHECK(policy.decode_every == 64);
  CHECK(policy.decode_slack == 8);
}

TEST_CASE("config: a backend is a name or a mapping with its device and params") {
  const kvc::Config named = parse("backend: cuda\n");
  CHECK(named.cache.backend == "cuda");
  CHECK(named.cache.backend_device == -1);
  CHECK(named.cache.backend_params.empty());
  const kvc::Config mapped =
      parse("backend:\n  name: cuda\n  device: 2\n  params: {streams: 4, mode: fast}\n");
  CHECK(mapped.cache.backend == "cuda");
  CHECK(mapped.cache.backend_device == 2);
  const std::vector<std::pair<std::string, std::string>> params{{"streams", "4"}, {"mode", "fast"}};
  CHECK(mapped.cache.backend_params == params);
  CHECK(config_error("backend: {device: 1}\n") ==
        "cfg:1: backend.name: missing, a backend section needs a name");
  CHECK(contains(config_error("backend: {name: cpu, device: -1}\n"), "backend.device"));
  CHECK(contains(config_error("backend: {name: cpu, devices: 1}\n"),
                 "backend.devices: unknown key"));
  CHECK(contains(config_error("backend: {name: cpu, params: {a: [1]}}\n"), "backend.params.a"));
}

TEST_CASE("config: dtype sets the formats of K and V, k_dtype and v_dtype each one") {
  const kvc::CacheConfig defaults;
  const struct {
    const char* yaml;
    kvc_dtype k, v;
  } cases[] = {
      {"cache: {k_dtype: f32}", KVC_DTYPE_F32, defaults.v_dtype},
      {"cache: {v_dtype: bf16}", defaults.k_dtype, KVC_DTYPE_BF16},
      {"cache: {dtype: bf16, v_dtype: f32}", KVC_DTYPE_BF16, KVC_DTYPE_F32},
      // Whichever comes first: the specific key wins.
      {"cache: {k_dtype: f32, dtype: bf16}", KVC_DTYPE_F32, KVC_DTYPE_BF16},
      {"cache: {k_dtype: f16, v_dtype: f32, dtype: bf16}", KVC_DTYPE_F16, KVC_DTYPE_F32},
  };
  for (const auto& c : cases) {
    CAPTURE(c.yaml);
    const kvc::Config config = parse(c.yaml);
    CHECK(config.cache.k_dtype == c.k);
    CHECK(config.cache.v_dtype == c.v);
  }
  CHECK(config_error("cache:\n  v_dtype: q4\n") ==
        "cfg:2: cache.v_dtype: expected one of f32, f16, bf16, q8_0, q4_0, got 'q4'");
}

TEST_CASE("config: the other enum values") {
  CHECK(parse("cache: {dtype: f32}").cache.k_dtype == KVC_DTYPE_F32);
  CHECK(parse("cache: {dtype: f16}").cache.v_dtype == KVC_DTYPE_F16);
  CHECK(parse("cache: {layout: paged}").cache.layout == KVC_LAYOUT_PAGED);
  CHECK(parse("policy: {name: x, compress: {prefill: none}}").policy->prefill ==
        kvc::PrefillCompression::none);
  CHECK(parse("policy: {name: x, compress: {prefill: once}}").policy->prefill ==
        kvc::PrefillCompression::once);
}

TEST_CASE("config: q_heads defaults to kv_heads and must be a multiple of it") {
  CHECK(parse("cache:\n  kv_heads: 8\n").cache.q_heads == 8);
  CHECK(parse("cache:\n  kv_heads: 8\n  q_heads: 0\n").cache.q_heads == 8);  // 0: the default
  CHECK(parse("").cache.q_heads == 1);
  CHECK(parse("cache:\n  q_heads: 12\n").cache.q_heads == 12);  // kv_heads defaults to 1
  CHECK(parse("cache:\n  q_heads: 24\n  kv_heads: 8\n").cache.q_heads == 24);  // any order
  const std::string error = config_error("cache:\n  kv_heads: 8\n  q_heads: 12\n");
  CHECK(error == "cfg:3: cache.q_heads: q_heads must be a positive multiple of kv_heads (8), got 12");
}

TEST_CASE("config: a budget is a token count or a ratio") {
  SUBCASE("integer: tokens") {
    const kvc::PolicyConfig policy = *parse("policy: {name: snapkv, budget: 1}").policy;
    CHECK(policy.budget_tokens == 1);
    CHECK(policy.budget_ratio == 0.0);
  }
  SUBCASE("fraction: ratio") {
    const kvc::PolicyConfig policy = *parse("policy: {name: snapkv, budget: 0.25}").policy;
    CHECK(policy.budget_tokens == 0);
    CHECK(policy.budget_ratio == 0.25);
  }
  SUBCASE("1.0 is the whole sequence as a ratio") {
    CHECK(parse("policy: {name: snapkv, budget: 1.0}").policy->budget_ratio == 1.0);
  }
  SUBCASE("anything else is an error") {
    for (const char* bad : {"0", "-3", "0.0", "1.5", "-0.5", "2147483648", "many", "true"}) {
      CAPTURE(bad);
      const std::string error =
          config_error(std::string("policy:\n  name: snapkv\n  budget: ") + bad + "\n");
      CHECK(error == std::string("cfg:3: policy.budget: expected an integer >= 1 (tokens) or a "
                                 "number in (0, 1] (ratio), got '") +
                         bad + "'");
    }
  }
}

TEST_CASE("config: policy.demote sets the demoted formats, k_format and v_format each one") {
  const kvc::DemoteConfig off = parse("policy: {name: x}").policy->demote;
  CHECK(!off.enabled);
  CHECK(!off.k_dtype);
  CHECK(!off.v_dtype);
  CHECK(off.keep == 0.25);

  const kvc::DemoteConfig both = parse("policy: {name: x, demote: {format: q4_0}}").policy->demote;
  CHECK(both.enabled);
  CHECK(both.k_dtype == KVC_DTYPE_Q4_0);
  CHECK(both.v_dtype == KVC_DTYPE_Q4_0);
  CHECK(both.keep == 0.25);

  const kvc::DemoteConfig k_only =
      parse("policy: {name: x, demote: {k_format: q8_0}}").policy->demote;
  CHECK(k_only.enabled);
  CHECK(k_only.k_dtype == KVC_DTYPE_Q8_0);
  CHECK(!k_only.v_dtype);  // V keeps the cache's format

  // Whichever comes first: the specific key wins.
  const kvc::DemoteConfig mixed =
      parse("policy: {name: x, demote: {v_format: q8_0, format: q4_0, keep: 0.5}}").policy->demote;
  CHECK(mixed.k_dtype == KVC_DTYPE_Q4_0);
  CHECK(mixed.v_dtype == KVC_DTYPE_Q8_0);
  CHECK(mixed.keep == 0.5);
  CHECK(parse("policy: {name: x, demote: {format: q4_0, keep: 0}}").policy->demote.keep == 0.0);
  CHECK(parse("policy: {name: x, demote: {format: q4_0, keep: 1}}").policy->demote.keep == 1.0);
}

TEST_CASE("config: policy.demote errors name the key") {
  const std::string head = "policy:\n  name: x\n  demote:\n";
  CHECK(config_error(head + "    format: q4_0\n    every: 3\n") ==
        "cfg:5: policy.demote.every: unknown key, expected one of format, k_format, v_format, "
        "keep");
  CHECK(config_error(head + "    format: q4\n") ==
        "cfg:4: policy.demote.format: expected one of f32, f16, bf16, q8_0, q4_0, got 'q4'");
  CHECK(config_error(head + "    v_format: int4\n") ==
        "cfg:4: policy.demote.v_format: expected one of f32, f16, bf16, q8_0, q4_0, got 'int4'");
  for (const char* bad : {"1.5", "-0.5", "abc", "nan"}) {
    CAPTURE(bad);
    CHECK(config_error(head + "    format: q4_0\n    keep: " + bad + "\n") ==
          std::string("cfg:5: policy.demote.keep: expected a number in [0, 1], got '") + bad +
              "'");
  }
  CHECK(config_error(head + "    keep: 0.5\n") ==
        "cfg:3: policy.demote.format: missing, demote needs a format (or k_format, v_format)");
  CHECK(config_error("policy: {name: x, demote: {}}\n") ==
        "cfg:1: policy.demote.format: missing, demote needs a format (or k_format, v_format)");
}

TEST_CASE("config: policy params keep their file order and their text") {
  const kvc::Config config = parse(R"(policy:
  name: custom
  params:
    zeta: 1
    alpha: two words
    mid: 0.5
    flag: true
)");
  const kvc::PolicyConfig& policy = *config.policy;
  const std::vector<std::pair<std::string, std::string>> expected{
      {"zeta", "1"}, {"alpha", "two words"}, {"mid", "0.5"}, {"flag", "true"}};
  CHECK(policy.params == expected);
}

TEST_CASE("config: empty sections and lists are allowed, an empty policy still needs a name") {
  const kvc::Config config = parse("cache:\nplugins:\n  paths:\n");
  CHECK(config.cache.layers == kvc::CacheConfig{}.layers);
  CHECK(config.plugin_paths.empty());
  CHECK(config_error("policy:\n") == "cfg:1: policy.name: missing, a policy section needs a name");
  CHECK(config_error("cache: {}\npolicy:\n  budget: 8\n") ==
        "cfg:2: policy.name: missing, a policy section needs a name");
}

TEST_CASE("config: YAML syntax errors name the line") {
  const std::string error = config_error("cache:\n  layers: [1, 2\n");
  CHECK(contains(error, "YAML syntax error: "));
  CHECK(error.rfind("cfg:", 0) == 0);
  CHECK(config_error("cache:\n  layers: 4\n   head_dim: 8\n")
            .rfind("cfg:3: YAML syntax error: ", 0) == 0);
}

// yaml-cpp 0.7.0 reads a ',' where a document's value should start as an empty document
// without consuming it, forever; each of these once made parsing allocate until memory ran out.
TEST_CASE("config: a ',' where a document's value should start is a syntax error, not a hang") {
  const std::pair<const char*, const char*> cases[] = {
      {",", "cfg:1: YAML syntax error: unexpected ',' at column 1"},
      {",a: 1", "cfg:1: YAML syntax error: unexpected ',' at column 1"},
      {", : 1", "cfg:1: YAML syntax error: unexpected ',' at column 1"},
      {"  ,\n", "cfg:1: YAML syntax error: unexpected ',' at column 3"},
      {"---\n,\n", "cfg:2: YAML syntax error: unexpected ',' at column 1"},
      {"&anchor ,", "cfg:1: YAML syntax error: unexpected ',' at column 9"},
      {"!tag ,", "cfg:1: YAML syntax error: unexpected ',' at column 6"},
      {"\"text\",", "cfg:1: YAML syntax error: unexpected ',' at column 7"},
      {"{cache: {}},", "cfg:1: YAML syntax error: unexpected ',' at column 12"},
      {"- a\n,\n", "cfg:2: YAML syntax error: unexpected ',' at column 1"},
      {"cache: {}\n...\n,\n", "cfg:3: YAML syntax error: unexpected ',' at column 1"},
      {"|\n  text\n,\n", "cfg:3: YAML syntax error: unexpected ',' at column 1"},
  };
  // Not a structured binding: CAPTURE's lambda cannot capture one in C++17 (clang refuses).
  for (const auto& c : cases) {
    const char* yaml = c.first;
    CAPTURE(yaml);
    CHECK(config_error(yaml) == std::string(c.second) + " where a value should start");
  }
  // Inside a flow collection the same ',' is an empty entry, and still parses.
  CHECK(parse("plugins: {paths: [a, b,]}\n").plugin_paths == std::vector<std::string>{"a", "b"});
}

TEST_CASE("config: the document and every section must be mappings") {
  CHECK(config_error("- a\n- b\n") == "cfg:1: top level: expected a mapping, got a sequence");
  CHECK(config_error("just text\n") == "cfg:1: top level: expected a mapping, got 'just text'");
  CHECK(config_error("threads: 1\ncache: 32\n") == "cfg:2: cache: expected a mapping, got '32'");
  CHECK(config_error("policy:\n  - snapkv\n") ==
        "cfg:2: policy: expected a mapping, got a sequence");
  CHECK(config_error("policy:\n  name: x\n  compress: per_chunk\n") ==
        "cfg:3: policy.compress: expected a mapping, got 'per_chunk'");
  CHECK(config_error("plugins: [a, b]\n") == "cfg:1: plugins: expected a mapping, got a sequence");
}

TEST_CASE("config: only one YAML document") {
  CHECK(config_error("threads: 1\n---\nthreads: 2\n") ==
        "cfg:3: top level: expected a single YAML document, got 2");
}

TEST_CASE("config: stores are read in file order, with their plugin and parameters as written") {
  const kvc::Config config = parse(
      "stores:\n"
      "  shared: { plugin: redis, params: { host: 127.0.0.1, port: 6379 } }\n"
      "  local:\n"
      "    plugin: host\n");
  REQUIRE(config.stores.has_value());
  REQUIRE(config.stores->size() == 2);
  const kvc::StoreConfig& shared = (*config.stores)[0];
  CHECK(shared.name == "shared");
  CHECK(shared.plugin == "redis");
  CHECK(shared.params == std::vector<std::pair<std::string, std::string>>{
                             {"host", "127.0.0.1"}, {"port", "6379"}});
  CHECK((*config.stores)[1].name == "local");
  CHECK((*config.stores)[1].plugin == "host");
  CHECK((*config.stores)[1].params.empty());
  CHECK_FALSE(parse("threads: 1\n").stores.has_value());
  CHECK(parse("stores:\n").stores->empty());
}

TEST_CASE("config: a store needs a non-empty name and a plugin, and scalar parameters") {
  CHECK(config_error("stores:\n  s: { params: { a: 1 } }\n") ==
        "cfg:2: stores.s.plugin: missing, a store needs a plugin");
  CHECK(config_error("stores:\n  s:\n") ==
        "cfg:2: stores.s: expected a mapping with a plugin, got null");
  CHECK(config_error("stores:\n  \"\": { plugin: host }\n") ==
        "cfg:2: stores: a store name must not be empty");
  CHECK(config_error("stores:\n  s: { plugin: \"\" }\n") ==
        "cfg:2: stores.s.plugin: expected a name, got ''");
  CHECK(config_error("stores:\n  s: { plugin: host, size: 3 }\n") ==
        "cfg:2: stores.s.size: unknown key, expected one of plugin, params");
  CHECK(config_error("stores:\n  s: { plugin: host, params: { a: [1] } }\n") ==
        "cfg:2: stores.s.params.a: expected a scalar value, got a sequence");
  CHECK(config_error("stores:\n  s: { plugin: host }\n  s: { plugin: disk }\n") ==
        "cfg:3: stores.s: duplicate key (first at line 2)");
  CHECK(config_error("stores: [host]\n") == "cfg:1: stores: expected a mapping, got a sequence");
}

TEST_CASE("config: unknown keys are reported at the key with the valid keys") {
  CHECK(config_error("threads: 1\ncolour: red\n") ==
        "cfg:2: colour: unknown key, expected one of threads, plugins, backend, cache, policy, "
        "prefix_cache, stores");
  CHECK(config_error("cache:\n  layers: 2\n  colour: red\n") ==
        "cfg:3: cache.colour: unknown key, expected one of layers, kv_heads, q_heads, head_dim, "
        "dtype, k_dtype, v_dtype, k_rotation, layout, block_tokens, growth_factor, memory_limit");
  CHECK(config_error("policy:\n  name: x\n  window: 3\n") ==
        "cfg:3: policy.window: unknown key, expected one of name, budget, sinks, recent, params, "
        "compress, demote");
  CHECK(config_error("policy:\n  name: x\n  compress:\n    every: 3\n") ==
        "cfg:4: policy.compress.every: unknown key, expected one of prefill, decode_every, "
        "decode_slack");
  CHECK(config_error("plugins:\n  path: [a]\n") ==
        "cfg:2: plugins.path: unknown key, expected one of paths");
  // A dotted key is a key of its own, not a path into the section.
  CHECK(contains(config_error("cache:\n  x.layers: 2\n"), "cfg:2: cache.x.layers: unknown key"));
}

TEST_CASE("config: duplicate keys are reported at the second one") {
  CHECK(config_error("cache:\n  layers: 2\n  head_dim: 64\n  layers: 4\n") ==
        "cfg:4: cache.layers: duplicate key (first at line 2)");
  CHECK(config_error("threads: 1\nthreads: 2\n") ==
        "cfg:2: threads: duplicate key (first at line 1)");
  CHECK(config_error("policy:\n  name: x\n  params: {window: 1, window: 2}\n") ==
        "cfg:3: policy.params.window: duplicate key (first at line 3)");
}

TEST_CASE("config: integers must be integers in range") {
  // The reader checks types; the limits are the shared ones of cache_params.cpp, reported at
  // the key's line.
  CHECK(config_error("cache:\n  layers: 4\n  head_dim: abc\n") ==
        "cfg:3: cache.head_dim: expected an integer, got 'abc'");
  CHECK(config_error("cache:\n  head_dim: 2048\n") ==
        "cfg:2: cache.head_dim: head_dim must be in 1..1024, got 2048");
  CHECK(config_error("cache:\n  layers: 2\n  head_dim: 0\n") ==
        "cfg:3: cache.head_dim: head_dim must be in 1..1024, got 0");
  CHECK(config_error("cache:\n  layers: -3\n") == "cfg:2: cache.layers: layers must be in 1..4096, got -3");
  CHECK(config_error("cache:\n  layers: 12.5\n") ==
        "cfg:2: cache.layers: expected an integer, got '12.5'");
  CHECK(config_error("cache:\n  layers: true\n") ==
        "cfg:2: cache.layers: expected an integer, got 'true'");
  CHECK(config_error("cache:\n  layers: 0x10\n") ==
        "cfg:2: cache.layers: expected an integer, got '0x10'");
  CHECK(config_error("cache:\n  layers: 2147483648\n") ==
        "cfg:2: cache.layers: expected an integer, got '2147483648'");
  CHECK(config_error("cache:\n  layers: 99999999999999999999999\n") ==
        "cfg:2: cache.layers: expected an integer, got '99999999999999999999999'");
  CHECK(config_error("cache:\n  kv_heads: [1]\n") ==
        "cfg:2: cache.kv_heads: expected an integer, got a sequence");
  CHECK(config_error("cache:\n  block_tokens: 65537\n") ==
        "cfg:2: cache.block_tokens: block_tokens must be in 1..65536, got 65537");
  CHECK(config_error("threads: -1\n") == "cfg:1: threads: expected an integer >= 0, got '-1'");
  CHECK(config_error("policy:\n  name: x\n  sinks: -4\n") ==
        "cfg:3: policy.sinks: expected an integer >= 0, got '-4'");
  CHECK(config_error("policy:\n  name: x\n  compress: {decode_every: 1.5}\n") ==
        "cfg:3: policy.compress.decode_every: expected an integer >= 0, got '1.5'");
  CHECK(parse("cache: {layers: 4096, block_tokens: 65536}").cache.layers == 4096);
  CHECK(parse("threads: +3").threads == 3);
}

TEST_CASE("config: an empty value is reported on its key's line") {
  CHECK(config_error("cache:\n  layers:\n  head_dim: 8\n") ==
        "cfg:2: cache.layers: expected an integer, got null");
}

TEST_CASE("config: choices name the allowed values") {
  CHECK(config_error("cache:\n  dtype: f64\n") ==
        "cfg:2: cache.dtype: expected one of f32, f16, bf16, q8_0, q4_0, got 'f64'");
  CHECK(config_error("cache:\n  layout: F16\n") ==
        "cfg:2: cache.layout: expected one of paged, contiguous, got 'F16'");
  CHECK(config_error("policy:\n  name: x\n  compress:\n    prefill: always\n") ==
        "cfg:4: policy.compress.prefill: expected one of none, per_chunk, once, got 'always'");
}

TEST_CASE("config: growth_factor must be a number above 1") {
  CHECK(parse("cache: {growth_factor: 3}").cache.growth_factor == 3.0);
  for (const char* bad : {"inf", "nan", "fast"}) {
    CAPTURE(bad);
    CHECK(config_error(std::string("cache:\n  growth_factor: ") + bad + "\n") ==
          std::string("cfg:2: cache.growth_factor: expected a number, got '") + bad + "'");
  }
  for (const char* bad : {"1.0", "1", "0.5", "-2"}) {
    CAPTURE(bad);
    CHECK(config_error(std::string("cache:\n  growth_factor: ") + bad + "\n")
              .rfind("cfg:2: cache.growth_factor: growth_factor must be in 1.01..16, got ", 0) == 0);
  }
  CHECK(parse("cache: {growth_factor: 16}").cache.growth_factor == 16.0);
  CHECK(config_error("cache:\n  growth_factor: 1e10\n") ==
        "cfg:2: cache.growth_factor: growth_factor must be in 1.01..16, got 1e+10");
}

TEST_CASE("config: the shape is bounded, layers x kv_heads too") {
  CHECK(config_error("cache:\n  layers: 4097\n") ==
        "cfg:2: cache.layers: layers must be in 1..4096, got 4097");
  CHECK(config_error("cache:\n  kv_heads: 4097\n") ==
        "cfg:2: cache.kv_heads: kv_heads must be in 1..4096, got 4097");
  CHECK(config_error("cache:\n  kv_heads: 8\n  q_heads: 16392\n") ==
        "cfg:3: cache.q_heads: q_heads must be in 1..16384, got 16392");
  CHECK(config_error("cache:\n  layers: 4096\n  kv_heads: 256\n") ==
        "cfg:3: cache.kv_heads: kv_heads must be at most 16 for 4096 layers "
        "(layers x kv_heads at most 65536), got 256");
  const kvc::Config widest = parse("cache: {layers: 256, kv_heads: 256}");
  CHECK(widest.cache.layers * widest.cache.kv_heads == 65536);
}

TEST_CASE("config: memory_limit is a positive byte size") {
  CHECK(parse("cache: {memory_limit: 1000}").cache.memory_limit == 1000);
  CHECK(parse("cache: {memory_limit: 512 MiB}").cache.memory_limit == 512u << 20);
  CHECK(config_error("cache:\n  memory_limit: 0GiB\n") ==
        "cfg:2: cache.memory_limit: memory_limit must be > 0");
  CHECK(config_error("cache:\n  memory_limit: 2gb\n") ==
        "cfg:2: cache.memory_limit: invalid byte size '2gb': unknown unit 'gb', expected one of "
        "B, KB, MB, GB, KiB, MiB, GiB, TiB");
  CHECK(config_error("cache:\n  memory_limit: {}\n") ==
        "cfg:2: cache.memory_limit: expected a byte size such as 2GiB, got a mapping");
}

TEST_CASE("config: names and paths must be non-empty strings") {
  CHECK(config_error("backend: ''\n") == "cfg:1: backend: expected a name, got ''");
  CHECK(config_error("backend: [cpu]\n") == "cfg:1: backend: expected a name, got a sequence");
  CHECK(config_error("policy:\n  name:\n") == "cfg:2: policy.name: expected a name, got null");
  CHECK(config_error("plugins:\n  paths: /opt\n") ==
        "cfg:2: plugins.paths: expected a sequence of paths, got '/opt'");
  CHECK(config_error("plugins:\n  paths:\n    - a\n    - {b: c}\n") ==
        "cfg:4: plugins.paths[1]: expected a path, got a mapping");
  CHECK(config_error("policy:\n  name: x\n  params:\n    window: [1, 2]\n") ==
        "cfg:4: policy.params.window: expected a scalar value, got a sequence");
}

TEST_CASE("config: the source name starts every message") {
  try {
    kvc::parse_config("threads: x\n", "/etc/kvcache.yaml");
    FAIL("expected an error");
  } catch (const kvc::Error& e) {
    CHECK(std::string(e.what()) ==
          "/etc/kvcache.yaml:1: threads: expected an integer >= 0, got 'x'");
  }
}

TEST_CASE("config: parse_byte_size reads numbers with units") {
  CHECK(kvc::parse_byte_size("0") == 0);
  CHECK(kvc::parse_byte_size("1000") == 1000);
  CHECK(kvc::parse_byte_size("7B") == 7);
  CHECK(kvc::parse_byte_size("1KB") == 1000);
  CHECK(kvc::parse_byte_size("3MB") == 3000000);
  CHECK(kvc::parse_byte_size("1GB") == 1000000000);
  CHECK(kvc::parse_byte_size("64KiB") == 64 * 1024);
  CHECK(kvc::parse_byte_size("512MiB") == size_t{512} << 20);
  CHECK(kvc::parse_byte_size("2GiB") == 2 * kGiB);
  CHECK(kvc::parse_byte_size("3TiB") == size_t{3} << 40);
  CHECK(kvc::parse_byte_size("2 GiB") == 2 * kGiB);
  CHECK(kvc::parse_byte_size("2\tGiB") == 2 * kGiB);
  CHECK(kvc::parse_byte_size("1.5GiB") == 3 * kGiB / 2);
  CHECK(kvc::parse_byte_size("1.1KB") == 1100);  // exact, not 1099 from binary rounding
  CHECK(kvc::parse_byte_size("0.001KiB") == 1);  // 1.024 bytes, rounded down
  CHECK(kvc::parse_byte_size("16777215TiB") == SIZE_MAX - ((size_t{1} << 40) - 1));
  CHECK(kvc::parse_byte_size("16777215.99999999999999999999TiB") == SIZE_MAX);
  CHECK(kvc::parse_byte_size("18446744073709551615") == SIZE_MAX);
}

TEST_CASE("config: parse_byte_size rejects bad sizes") {
  CHECK(byte_size_error("") == "invalid byte size '': empty");
  CHECK(byte_size_error("-1GiB") == "invalid byte size '-1GiB': negative");
  CHECK(byte_size_error("2XB") ==
        "invalid byte size '2XB': unknown unit 'XB', expected one of B, KB, MB, GB, KiB, MiB, "
        "GiB, TiB");
  CHECK(contains(byte_size_error("2gib"), "unknown unit 'gib'"));  // units are case-sensitive
  CHECK(contains(byte_size_error("2TB"), "unknown unit 'TB'"));
  CHECK(contains(byte_size_error("GiB"), "expected a number"));
  CHECK(contains(byte_size_error(".5GiB"), "expected a number"));
  CHECK(contains(byte_size_error("1.GiB"), "expected a number"));
  CHECK(contains(byte_size_error("1.2.3GiB"), "expected a number"));
  CHECK(contains(byte_size_error(" 2GiB"), "expected a number"));
  CHECK(contains(byte_size_error("+2GiB"), "expected a number"));
  CHECK(contains(byte_size_error("2GiB "), "unknown unit"));
  CHECK(byte_size_error("1.5") ==
        "invalid byte size '1.5': a number of bytes without a unit must be whole");
  CHECK(byte_size_error("18446744073709551616") ==
        "invalid byte size '18446744073709551616': too large");
  CHECK(byte_size_error("16777216TiB") == "invalid byte size '16777216TiB': too large");
  CHECK(byte_size_error("17592186044416.0001MiB") ==
        "invalid byte size '17592186044416.0001MiB': too large");
}
