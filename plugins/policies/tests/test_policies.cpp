// Unit tests of the built-in policy plugins: each library is loaded by path with dlopen, its
// entry point called with a minimal host API, and its vtable driven directly on small
// hand-made inputs. Expected kept sets come from keep_top(), an independent transcription of
// the selection rule (protect sinks and recent tokens, then the highest scores, ties toward
// later tokens), not from the plugins' code.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "params.hpp"
#include "errors.hpp"

namespace {

// ------------------------------------------------------------------------- minimal host

void host_log(void*, kvc_log_level, const char*) {}
void host_parallel_for(void*, size_t n, size_t, kvc_range_fn body, void* user_data) {
  if (n > 0) body(user_data, 0, n);
}
void* host_alloc(void*, size_t bytes, size_t alignment) {
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}
void host_free(void*, void* ptr) { std::free(ptr); }

const kvc_host_api kHost = {sizeof(kvc_host_api), KVC_PLUGIN_ABI_VERSION, nullptr, &host_log,
                            &host_parallel_for,   &host_alloc,            &host_free};

// ------------------------------------------------------------------------- plugin loading

// doctest cannot print function pointers: compare through this.
template <class F>
bool is_set(F* f) {
  return f != nullptr;
}


const std::map<std::string, const char*>& plugin_paths() {
  static const std::map<std::string, const char*> paths = {
      {"full", KVC_POLICY_PATH_FULL},         {"window", KVC_POLICY_PATH_WINDOW},
      {"streaming", KVC_POLICY_PATH_STREAMING}, {"h2o", KVC_POLICY_PATH_H2O},
      {"tova", KVC_POLICY_PATH_TOVA},         {"snapkv", KVC_POLICY_PATH_SNAPKV},
      {"pyramidkv", KVC_POLICY_PATH_PYRAMIDKV}, {"adakv", KVC_POLICY_PATH_ADAKV},
      {"knorm", KVC_POLICY_PATH_KNORM},       {"keydiff", KVC_POLICY_PATH_KEYDIFF},
      {"random", KVC_POLICY_PATH_RANDOM},
  };
  return paths;
}

struct Plugin {
  void* handle = nullptr;
  const kvc_plugin_descriptor* descriptor = nullptr;
  const kvc_policy_vtable* vtable = nullptr;
};

// Loaded once per name and kept loaded, as the host does.
const Plugin& plugin(const std::string& name) {
  static std::map<std::string, Plugin> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second;
  Plugin p;
  const char* path = plugin_paths().at(name);
  p.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(p.handle != nullptr, dlerror());
  auto entry = reinterpret_cast<kvc_plugin_entry_fn>(dlsym(p.handle, KVC_PLUGIN_ENTRY_SYMBOL));
  REQUIRE(is_set(entry));
  const kvc_plugin_descriptor* descriptors = nullptr;
  size_t count = 0;
  kvc_plugin_error error{};
  REQUIRE(entry(&kHost, &descriptors, &count, &error) == KVC_OK);
  REQUIRE(count == 1);
  p.descriptor = &descriptors[0];
  p.vtable = static_cast<const kvc_policy_vtable*>(p.descriptor->vtable);
  return loaded.emplace(name, p).first->second;
}

using Params = std::vector<std::pair<std::string, std::string>>;

struct CreateResult {
  int32_t code;
  std::string message;
};

CreateResult try_create(const std::string& name, const Params& params) {
  const Plugin& p = plugin(name);
  std::vector<kvc_policy_param> c_params;
  for (const auto& kv : params) c_params.push_back({kv.first.c_str(), kv.second.c_str()});
  void* instance = nullptr;
  kvc_plugin_error error{};
  int32_t code = p.vtable->create(&kHost, c_params.data(), c_params.size(), &instance, &error);
  if (code == KVC_OK) {
    REQUIRE(instance != nullptr);
    p.vtable->destroy(instance);
    return {code, ""};
  }
  CHECK(instance == nullptr);
  return {code, error.message};
}

// One policy instance, destroyed at scope exit.
class Policy {
 public:
  explicit Policy(const std::string& name, const Params& params = {}) : plugin_(plugin(name)) {
    std::vector<kvc_policy_param> c_params;
    for (const auto& kv : params) c_params.push_back({kv.first.c_str(), kv.second.c_str()});
    kvc_plugin_error error{};
    int32_t code =
        plugin_.vtable->create(&kHost, c_params.data(), c_params.size(), &instance_, &error);
    REQUIRE_MESSAGE(code == KVC_OK, error.message);
  }
  ~Policy() { plugin_.vtable->destroy(instance_); }
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const kvc_policy_vtable& vtable() const { return *plugin_.vtable; }

  kvc_policy_needs needs() const {
    kvc_policy_needs needs{};
    needs.struct_size = sizeof needs;
    plugin_.vtable->needs(instance_, &needs);
    return needs;
  }

  int32_t score(std::vector<kvc_score_job>& jobs, std::string* message = nullptr) const {
    kvc_plugin_error error{};
    int32_t code = plugin_.vtable->score(instance_, jobs.data(), jobs.size(), &error);
    if (message) *message = error.message;
    return code;
  }

  std::vector<int32_t> budgets(const kvc_budget_request& request) const {
    std::vector<int32_t> out(static_cast<size_t>(request.n_heads), -1);
    kvc_plugin_error error{};
    int32_t code = plugin_.vtable->budgets(instance_, &request, out.data(), &error);
    REQUIRE_MESSAGE(code == KVC_OK, error.message);
    return out;
  }

 private:
  const Plugin& plugin_;
  void* instance_ = nullptr;
};

// ------------------------------------------------------------------------- inputs

// The tokens of one (sequence, layer, KV head); job() points a kvc_score_job at them.
struct Head {
  std::vector<int32_t> pos;
  std::vector<float> attn_sum, attn_last, attn_window, keys;
  int32_t head_dim = 0;
  std::vector<float> scores;

  static Head positions(int32_t n) {
    Head h;
    h.pos.resize(static_cast<size_t>(n));
    std::iota(h.pos.begin(), h.pos.end(), 0);
    return h;
  }

  kvc_score_job job(int32_t budget, int32_t sinks = 0, int32_t recent = 0, int32_t seq = 0,
                    int32_t layer = 0, int32_t kv_head = 0) {
    scores.assign(pos.size(), NAN);
    kvc_score_job j{};
    j.struct_size = sizeof j;
    j.seq_id = seq;
    j.layer = layer;
    j.kv_head = kv_head;
    j.n_tokens = static_cast<int32_t>(pos.size());
    j.pos = pos.data();
    j.attn_sum = attn_sum.empty() ? nullptr : attn_sum.data();
    j.attn_last = attn_last.empty() ? nullptr : attn_last.data();
    j.attn_window = attn_window.empty() ? nullptr : attn_window.data();
    j.keys = keys.empty() ? nullptr : keys.data();
    j.head_dim = head_dim;
    j.budget = budget;
    j.sinks = sinks;
    j.recent = recent;
    j.scores = scores.data();
    // The host's protected range: the first `sinks`, then the last `recent` of the rest.
    const int32_t n = j.n_tokens;
    j.sink_end = std::min(std::max(sinks, 0), n);
    j.recent_begin = std::max(j.sink_end, n - std::min(std::max(recent, 0), n));
    return j;
  }
};

// Scores of one head under `policy`.
std::vector<float> score_one(const Policy& policy, Head& head, int32_t budget, int32_t sinks = 0,
                             int32_t recent = 0) {
  std::vector<kvc_score_job> jobs{head.job(budget, sinks, recent)};
  std::string message;
  REQUIRE_MESSAGE(policy.score(jobs, &message) == KVC_OK, message);
  return head.scores;
}

// The selection rule, written independently: the first `sinks` and last `recent` tokens,
// then the best-scored others (higher first; equal scores: the later token) up to `budget`;
// returned in position order.
std::vector<int32_t> keep_top(const std::vector<float>& scores, int32_t budget, int32_t sinks = 0,
                              int32_t recent = 0) {
  const int32_t n = static_cast<int32_t>(scores.size());
  std::vector<int32_t> kept;
  if (n <= budget) {
    for (int32_t i = 0; i < n; ++i) kept.push_back(i);
    return kept;
  }
  std::vector<bool> keep(static_cast<size_t>(n), false);
  int32_t used = 0;
  std::vector<int32_t> others;
  for (int32_t i = 0; i < n; ++i) {
    if (i < sinks || i >= n - recent) {
      keep[static_cast<size_t>(i)] = true;
      ++used;
    } else {
      others.push_back(i);
    }
  }
  std::sort(others.begin(), others.end(), [&](int32_t a, int32_t b) {
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    return a > b;
  });
  for (int32_t k = 0; k < budget - used && k < static_cast<int32_t>(others.size()); ++k) {
    keep[static_cast<size_t>(others[static_cast<size_t>(k)])] = true;
  }
  for (int32_t i = 0; i < n; ++i) {
    if (keep[static_cast<size_t>(i)]) kept.push_back(i);
  }
  return kept;
}

using Ints = std::vector<int32_t>;
using Floats = std::vector<float>;

kvc_budget_request request_for(std::vector<kvc_score_job>& jobs, const Ints& configured,
                               int32_t layer, int32_t n_layers) {
  kvc_budget_request r{};
  r.struct_size = sizeof r;
  r.layer = layer;
  r.n_layers = n_layers;
  r.n_heads = static_cast<int32_t>(configured.size());
  r.configured = configured.data();
  r.jobs = jobs.data();
  return r;
}

}  // namespace

// ============================================================================ descriptors

TEST_CASE("every plugin exports one policy descriptor with its name and the ABI version") {
  const std::map<std::string, bool> scores = {
      {"full", false},     {"window", true},     {"streaming", true}, {"h2o", true},
      {"tova", true},      {"snapkv", true},     {"pyramidkv", false}, {"adakv", false},
      {"knorm", true},     {"keydiff", true},    {"random", true}};
  const std::map<std::string, bool> budgets = {{"full", true}, {"pyramidkv", true}, {"adakv", true}};
  for (const auto& entry : plugin_paths()) {
    const std::string& name = entry.first;
    CAPTURE(name);
    const Plugin& p = plugin(name);
    CHECK(p.descriptor->struct_size == sizeof(kvc_plugin_descriptor));
    CHECK(p.descriptor->abi_version == KVC_PLUGIN_ABI_VERSION);
    CHECK(p.descriptor->kind == KVC_PLUGIN_POLICY);
    CHECK(std::string(p.descriptor->name) == name);
    CHECK(p.descriptor->version == 1u);
    CHECK(p.vtable->struct_size == sizeof(kvc_policy_vtable));
    CHECK(is_set(p.vtable->create));
    CHECK(is_set(p.vtable->destroy));
    CHECK(is_set(p.vtable->needs));
    CHECK((is_set(p.vtable->score)) == scores.at(name));
    CHECK((is_set(p.vtable->budgets)) == (budgets.count(name) == 1));
    // Internal symbols stay hidden.
    CHECK(dlsym(p.handle, "_ZN3kvc8policies11write_errorEP16kvc_plugin_errorPKc") == nullptr);
  }
}

TEST_CASE("the entry point refuses a host of another ABI major and NULL out-parameters") {
  void* handle = dlopen(KVC_POLICY_PATH_WINDOW, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  auto entry = reinterpret_cast<kvc_plugin_entry_fn>(dlsym(handle, KVC_PLUGIN_ENTRY_SYMBOL));
  REQUIRE(is_set(entry));
  kvc_host_api other = kHost;
  other.abi_version = (KVC_PLUGIN_ABI_MAJOR + 1) << 16;
  const kvc_plugin_descriptor* descriptors = nullptr;
  size_t count = 0;
  kvc_plugin_error error{};
  CHECK(entry(&other, &descriptors, &count, &error) == KVC_ERR_PLUGIN);
  CHECK(std::string(error.message).find("plugin ABI") != std::string::npos);
  CHECK(entry(&kHost, nullptr, &count, &error) == KVC_ERR_INVALID_ARGUMENT);
  dlclose(handle);
}

TEST_CASE("needs: statistics, observation window, scorer and default sinks/recent") {
  struct Expect {
    std::string name;
    Params params;
    uint32_t stats;
    int32_t window;
    const char* scorer;
    int32_t sinks, recent;
  };
  const std::vector<Expect> expected = {
      {"full", {}, 0, 0, nullptr, 0, 0},
      {"window", {}, 0, 0, nullptr, 0, 0},
      {"streaming", {}, 0, 0, nullptr, 4, 0},
      {"h2o", {}, KVC_STAT_ATTN_SUM, 0, nullptr, 0, 0},
      {"tova", {}, KVC_STAT_ATTN_LAST, 0, nullptr, 0, 0},
      {"snapkv", {}, KVC_STAT_ATTN_WINDOW, 32, nullptr, 0, 32},
      {"snapkv", {{"window", "64"}}, KVC_STAT_ATTN_WINDOW, 64, nullptr, 0, 64},
      // Wrappers name their scorer and report nothing of it: the host asks the scorer.
      {"pyramidkv", {}, 0, 0, "snapkv", 0, 0},
      {"pyramidkv", {{"window", "16"}, {"beta", "10"}}, 0, 0, "snapkv", 0, 0},
      {"adakv", {}, 0, 0, "snapkv", 0, 0},
      {"adakv", {{"scorer", "h2o"}, {"recent_ratio", "0.25"}}, 0, 0, "h2o", 0, 0},
      {"adakv", {{"scorer", "streaming"}}, 0, 0, "streaming", 0, 0},
      {"adakv", {{"scorer", "my_policy"}, {"alpha", "3"}}, 0, 0, "my_policy", 0, 0},
      {"knorm", {}, KVC_STAT_KEYS, 0, nullptr, 0, 0},
      {"keydiff", {}, KVC_STAT_KEYS, 0, nullptr, 0, 0},
      {"random", {}, 0, 0, nullptr, 0, 0},
  };
  for (const Expect& e : expected) {
    CAPTURE(e.name);
    CAPTURE(e.params.size());
    Policy policy(e.name, e.params);
    kvc_policy_needs needs = policy.needs();
    CHECK(needs.struct_size == sizeof needs);
    CHECK(needs.stats == e.stats);
    if (e.stats & KVC_STAT_ATTN_WINDOW) CHECK(needs.observation_window == e.window);
    if (e.scorer == nullptr) {
      CHECK(needs.scorer == nullptr);
    } else {
      REQUIRE(needs.scorer != nullptr);
      CHECK(std::string(needs.scorer) == e.scorer);
    }
    CHECK(needs.default_sinks == e.sinks);
    CHECK(needs.default_recent == e.recent);
  }
}

TEST_CASE("needs writes no further than the host's struct_size") {
  Policy policy("snapkv");
  kvc_policy_needs needs;
  std::memset(&needs, 0x7F, sizeof needs);
  needs.struct_size = offsetof(kvc_policy_needs, scorer);  // an older, smaller struct
  policy.vtable().needs(nullptr, &needs);                    // NULL instance: ignored
  kvc_plugin_error error{};
  void* instance = nullptr;
  REQUIRE(policy.vtable().create(&kHost, nullptr, 0, &instance, &error) == KVC_OK);
  policy.vtable().needs(instance, &needs);
  policy.vtable().destroy(instance);
  CHECK(needs.stats == KVC_STAT_ATTN_WINDOW);
  CHECK(needs.observation_window == 32);
  CHECK(needs.default_recent == 0x7F7F7F7F);  // beyond struct_size: untouched
}

// ============================================================================ policies

TEST_CASE("full never evicts: no score function, unlimited budgets") {
  Policy policy("full");
  CHECK(!is_set(policy.vtable().score));
  Head a = Head::positions(20), b = Head::positions(3);
  std::vector<kvc_score_job> jobs{a.job(5), b.job(5)};
  Ints configured{5, 5};
  CHECK(policy.budgets(request_for(jobs, configured, 2, 4)) == Ints{INT32_MAX, INT32_MAX});
  CHECK(keep_top(Floats(20, 0.0f), INT32_MAX).size() == 20);
}

TEST_CASE("window keeps the most recent tokens: score = position") {
  Policy policy("window");
  Head head;
  head.pos = {0, 1, 2, 5, 6, 7, 10, 11, 12, 20, 21, 22};
  Floats scores = score_one(policy, head, 5);
  CHECK(scores == Floats{0, 1, 2, 5, 6, 7, 10, 11, 12, 20, 21, 22});
  CHECK(keep_top(scores, 5) == Ints{7, 8, 9, 10, 11});
}

TEST_CASE("streaming keeps 4 sinks and the most recent tokens") {
  Policy policy("streaming");
  CHECK(policy.needs().default_sinks == 4);
  Head head = Head::positions(16);
  Floats scores = score_one(policy, head, 8, 4, 0);
  CHECK(scores[15] == 15.0f);
  CHECK(keep_top(scores, 8, 4, 0) == Ints{0, 1, 2, 3, 12, 13, 14, 15});
}

TEST_CASE("h2o keeps the heavy hitters plus the recent half of the budget") {
  Head head = Head::positions(16);
  head.attn_sum = {0.5f, 0.1f, 5.0f, 0.2f, 0.1f, 0.3f, 0.1f, 4.0f,
                   0.1f, 3.0f, 0.2f, 0.1f, 0.4f, 0.0f, 0.1f, 0.2f};
  SUBCASE("default recent_ratio 0.5, budget 6: the last 3 tokens are recent") {
    Policy policy("h2o");
    Floats scores = score_one(policy, head, 6);
    for (int i = 0; i < 13; ++i) CHECK(scores[i] == head.attn_sum[i]);
    for (int i = 13; i < 16; ++i) CHECK(scores[i] == INFINITY);
    // Heavy hitters 2, 7, 9 and the recent 13..15 (13 has no attention at all).
    CHECK(keep_top(scores, 6) == Ints{2, 7, 9, 13, 14, 15});
  }
  SUBCASE("budget 7: floor(3.5) = 3 recent tokens, 4 heavy hitters") {
    Policy policy("h2o");
    Floats scores = score_one(policy, head, 7);
    CHECK(scores[12] == 0.4f);
    CHECK(scores[13] == INFINITY);
    CHECK(keep_top(scores, 7) == Ints{0, 2, 7, 9, 13, 14, 15});
  }
  SUBCASE("recent_ratio 0: pure accumulated attention") {
    Policy policy("h2o", {{"recent_ratio", "0"}});
    Floats scores = score_one(policy, head, 6);
    CHECK(scores == head.attn_sum);
    CHECK(keep_top(scores, 6) == Ints{0, 2, 5, 7, 9, 12});
  }
  SUBCASE("recent_ratio 1: a sliding window") {
    Policy policy("h2o", {{"recent_ratio", "1"}});
    Floats scores = score_one(policy, head, 6);
    CHECK(keep_top(scores, 6) == Ints{10, 11, 12, 13, 14, 15});
    CHECK(scores[9] == 3.0f);
  }
}

TEST_CASE("tova keeps what the last query attends to") {
  Policy policy("tova");
  Head head = Head::positions(10);
  head.attn_last = {0.05f, 0.30f, 0.02f, 0.01f, 0.20f, 0.01f, 0.15f, 0.06f, 0.10f, 0.10f};
  Floats scores = score_one(policy, head, 4);
  CHECK(scores == head.attn_last);
  // 0.30, 0.20, 0.15, then 0.10 twice: the later token (9) wins the tie.
  CHECK(keep_top(scores, 4) == Ints{1, 4, 6, 9});
}

TEST_CASE("snapkv max-pools the observation window's attention") {
  Head head = Head::positions(12);
  head.attn_window = {0.1f, 0, 0, 0, 0.9f, 0, 0, 0, 0, 0, 0.5f, 0.2f};
  SUBCASE("kernel 5, max (default)") {
    Policy policy("snapkv", {{"window", "2"}});
    CHECK(policy.needs().default_recent == 2);
    Floats scores = score_one(policy, head, 7, 0, 2);
    // max over [i-2, i+2], clamped at both ends.
    CHECK(scores == Floats{0.1f, 0.1f, 0.9f, 0.9f, 0.9f, 0.9f, 0.9f, 0, 0.5f, 0.5f, 0.5f, 0.5f});
    // The window (10, 11) is kept; the peak at 4 keeps its neighbours 2..6. Without pooling
    // the peak would stay isolated among zero-attention tokens.
    CHECK(keep_top(scores, 7, 0, 2) == Ints{2, 3, 4, 5, 6, 10, 11});
    CHECK(keep_top(head.attn_window, 7, 0, 2) == Ints{0, 4, 7, 8, 9, 10, 11});
  }
  SUBCASE("kernel 1 is the raw statistic") {
    Policy policy("snapkv", {{"kernel", "1"}});
    CHECK(score_one(policy, head, 7) == head.attn_window);
  }
  SUBCASE("a kernel wider than the head takes the maximum of all") {
    Policy policy("snapkv", {{"kernel", "31"}});
    Head small = Head::positions(3);
    small.attn_window = {1.0f, 5.0f, 2.0f};
    CHECK(score_one(policy, small, 2) == Floats{5.0f, 5.0f, 5.0f});
  }
}

TEST_CASE("snapkv avg pooling averages the entries inside the clamped window") {
  Policy policy("snapkv", {{"kernel", "3"}, {"pooling", "avg"}});
  Head head = Head::positions(6);
  head.attn_window = {3, 0, 6, 0, 0, 9};
  Floats scores = score_one(policy, head, 3);
  const Floats expected{1.5f, 3.0f, 2.0f, 2.0f, 3.0f, 4.5f};
  for (size_t i = 0; i < expected.size(); ++i) CHECK(scores[i] == doctest::Approx(expected[i]));
  CHECK(keep_top(scores, 3) == Ints{1, 4, 5});
}

TEST_CASE("pyramidkv: budgets decrease linearly over layers, mean = configured") {
  auto layer_budgets = [](const Policy& policy, int32_t configured, int32_t n_layers,
                          int32_t sinks, int32_t recent) {
    Ints out;
    for (int32_t layer = 0; layer < n_layers; ++layer) {
      // Longer than every protected range below, which the host would otherwise clamp.
      Head head = Head::positions(100);
      std::vector<kvc_score_job> jobs{head.job(configured, sinks, recent)};
      Ints configured_heads{configured};
      out.push_back(policy.budgets(request_for(jobs, configured_heads, layer, n_layers))[0]);
    }
    return out;
  };
  Policy policy("pyramidkv");  // beta 20
  SUBCASE("4 layers, budget 100, beta 20, nothing protected") {
    // b_min = 100/20 = 5, b_max = 195, step 190/3: 195, 131.67, 68.33, 5; round to nearest.
    Ints budgets = layer_budgets(policy, 100, 4, 0, 0);
    CHECK(budgets == Ints{195, 132, 68, 5});
    CHECK(std::accumulate(budgets.begin(), budgets.end(), 0) == 400);
  }
  SUBCASE("4 layers, budget 100, SnapKV's window of 32 kept in every layer") {
    // b = 100 - 32 = 68: b_min 3.4, b_max 132.6: 132.6, 89.53, 46.47, 3.4 -> 133, 90, 46, 3.
    Ints budgets = layer_budgets(policy, 100, 4, 0, 32);
    CHECK(budgets == Ints{165, 122, 78, 35});
    CHECK(std::accumulate(budgets.begin(), budgets.end(), 0) == 400);
  }
  SUBCASE("halves round away from zero; the sum stays within n_layers/2 of the target") {
    // b_min 0.5, b_max 19.5: 19.5, 13.17, 6.83, 0.5 -> 20, 13, 7, 1.
    Ints budgets = layer_budgets(policy, 10, 4, 0, 0);
    CHECK(budgets == Ints{20, 13, 7, 1});
    CHECK(std::accumulate(budgets.begin(), budgets.end(), 0) == 41);
  }
  SUBCASE("32 layers, budget 512: non-increasing, sum within 16 of 32 * 512") {
    Ints budgets = layer_budgets(policy, 512, 32, 4, 32);
    CHECK(budgets.front() == 36 + static_cast<int32_t>(std::lround(2 * 476 - 476 / 20.0)));
    CHECK(budgets.back() == 36 + static_cast<int32_t>(std::lround(476 / 20.0)));
    CHECK(std::is_sorted(budgets.rbegin(), budgets.rend()));
    int64_t sum = std::accumulate(budgets.begin(), budgets.end(), int64_t{0});
    CHECK(std::llabs(sum - 32 * 512) <= 16);
  }
  SUBCASE("beta 1 is uniform; one layer and small budgets keep the configured budget") {
    Policy uniform("pyramidkv", {{"beta", "1"}});
    CHECK(layer_budgets(uniform, 100, 4, 0, 0) == Ints{100, 100, 100, 100});
    CHECK(layer_budgets(policy, 100, 1, 0, 0) == Ints{100});
    CHECK(layer_budgets(policy, 30, 3, 0, 32) == Ints{30, 30, 30});
  }
  SUBCASE("each head follows its own configured budget") {
    Head a = Head::positions(10), b = Head::positions(10);
    std::vector<kvc_score_job> jobs{a.job(100), b.job(40)};
    Ints configured{100, 40};
    CHECK(policy.budgets(request_for(jobs, configured, 0, 4)) == Ints{195, 78});
    CHECK(policy.budgets(request_for(jobs, configured, 3, 4)) == Ints{5, 2});
  }
  SUBCASE("with SnapKV's scores, the last layer keeps only the peak") {
    Policy snapkv("snapkv", {{"kernel", "1"}});
    Head head = Head::positions(24);
    head.attn_window.assign(24, 0.01f);
    head.attn_window[5] = 0.5f;
    head.attn_window[17] = 0.3f;
    head.attn_window[11] = 0.2f;
    Floats scores = score_one(snapkv, head, 10);
    Ints budgets = layer_budgets(policy, 10, 4, 0, 0);
    CHECK(keep_top(scores, budgets[3]) == Ints{5});
    CHECK(keep_top(scores, budgets[2]) == Ints{5, 11, 17, 20, 21, 22, 23});
  }
}

TEST_CASE("adakv shares a layer's budget across heads, with a per-head floor") {
  // Head 0 concentrates its attention on a few tokens; head 1 spreads it.
  Head h0 = Head::positions(10), h1 = Head::positions(10);
  const Floats s0{0.30f, 0.25f, 0.20f, 0.15f, 0.05f, 0.02f, 0.01f, 0.01f, 0.005f, 0.005f};
  const Floats s1{0.11f, 0.09f, 0.10f, 0.12f, 0.08f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f};
  auto jobs_with_scores = [&](int32_t sinks, int32_t recent) {
    std::vector<kvc_score_job> jobs{h0.job(5, sinks, recent, 0, 0, 0),
                                    h1.job(5, sinks, recent, 0, 0, 1)};
    h0.scores = s0;
    h1.scores = s1;
    jobs[0].scores = h0.scores.data();
    jobs[1].scores = h1.scores.data();
    return jobs;
  };
  SUBCASE("floor 0.2, budgets 5 + 5: the concentrated head needs fewer slots") {
    Policy policy("adakv");
    std::vector<kvc_score_job> jobs = jobs_with_scores(0, 0);
    Ints configured{5, 5};
    // floor_h = floor(0.2 * 5) = 1: head 0 takes 0.30 (token 0), head 1 takes 0.12 (token 3).
    // The other 8 slots go to the best of the rest, jointly: 0.25, 0.20, 0.15 (head 0),
    // 0.11 and four 0.10 (head 1; ties toward later tokens 9, 8, 7, 6).
    Ints budgets = policy.budgets(request_for(jobs, configured, 0, 1));
    CHECK(budgets == Ints{4, 6});
    CHECK(budgets[0] + budgets[1] == 10);
    CHECK(keep_top(s0, budgets[0]) == Ints{0, 1, 2, 3});
    CHECK(keep_top(s1, budgets[1]) == Ints{0, 3, 6, 7, 8, 9});
  }
  SUBCASE("floor 1 keeps the configured budgets") {
    Policy policy("adakv", {{"floor", "1"}});
    std::vector<kvc_score_job> jobs = jobs_with_scores(0, 0);
    Ints configured{5, 5};
    CHECK(policy.budgets(request_for(jobs, configured, 0, 1)) == Ints{5, 5});
  }
  SUBCASE("protected tokens stay outside the competition") {
    // sinks 1, recent 2: each head protects 3 tokens; 3 free slots each, pooled (floor 0).
    // Candidates are tokens 1..7 of each head.
    Policy policy("adakv");
    std::vector<kvc_score_job> jobs = jobs_with_scores(1, 2);
    Floats c0{9.0f, 0.5f, 0.3f, 0.01f, 0.01f, 0.01f, 0.01f, 0.01f, 9.0f, 9.0f};
    Floats c1 = s1;
    h0.scores = c0;
    jobs[0].scores = h0.scores.data();
    Ints configured{6, 6};
    // Best 6 candidates: 0.5, 0.3 (head 0), 0.12 (3), 0.10 at 7, 6, 5 (head 1).
    Ints budgets = policy.budgets(request_for(jobs, configured, 0, 1));
    CHECK(budgets == Ints{5, 7});
    CHECK(keep_top(c0, budgets[0], 1, 2) == Ints{0, 1, 2, 8, 9});
    CHECK(keep_top(c1, budgets[1], 1, 2) == Ints{0, 3, 5, 6, 7, 8, 9});
  }
  SUBCASE("the floor is capped by a short head; its unused share goes to the others") {
    Policy policy("adakv");
    Head a = Head::positions(3), b = Head::positions(20);
    std::vector<kvc_score_job> jobs{a.job(10), b.job(10)};
    a.scores.assign(3, 1.0f);
    b.scores.assign(20, 0.5f);
    jobs[0].scores = a.scores.data();
    jobs[1].scores = b.scores.data();
    Ints configured{10, 10};
    // floors 2 and 2; 16 pooled slots: head 0's last token (1.0) and 15 of head 1's.
    CHECK(policy.budgets(request_for(jobs, configured, 0, 1)) == Ints{3, 17});
  }
}

TEST_CASE("knorm keeps the keys with the lowest L2 norm") {
  Policy policy("knorm");
  Head head = Head::positions(6);
  head.head_dim = 4;
  head.keys = {3, 4, 0, 0,  1, 0, 0, 0,  0, 0, 2, 0,  1, 1, 1, 1,  0, 0, 0, 0.5f,  6, 8, 0, 0};
  Floats scores = score_one(policy, head, 3);
  CHECK(scores == Floats{-5.0f, -1.0f, -2.0f, -2.0f, -0.5f, -10.0f});
  // Norms 0.5 (4), 1 (1), then 2 twice: the later token (3).
  CHECK(keep_top(scores, 3) == Ints{1, 3, 4});
}

namespace {

// -cos(k_i, anchor), in double, straight from the definition.
Floats keydiff_reference(const Floats& keys, int dim, bool normalize) {
  const size_t n = keys.size() / static_cast<size_t>(dim);
  std::vector<double> anchor(static_cast<size_t>(dim), 0.0);
  auto norm = [&](size_t i) {
    double s = 0;
    for (int d = 0; d < dim; ++d) s += double(keys[i * dim + d]) * keys[i * dim + d];
    return std::sqrt(s);
  };
  for (size_t i = 0; i < n; ++i) {
    double w = normalize ? 1.0 / std::max(norm(i), 1e-12) : 1.0;
    for (int d = 0; d < dim; ++d) anchor[d] += w * keys[i * dim + d] / double(n);
  }
  double anchor_norm = 0;
  for (double a : anchor) anchor_norm += a * a;
  anchor_norm = std::sqrt(anchor_norm);
  Floats out;
  for (size_t i = 0; i < n; ++i) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += keys[i * dim + d] * anchor[d];
    out.push_back(static_cast<float>(-dot / std::max(norm(i) * anchor_norm, 1e-8)));
  }
  return out;
}

}  // namespace

TEST_CASE("keydiff keeps the keys least similar to the mean key") {
  Head head = Head::positions(6);
  head.head_dim = 2;
  // Three keys along x, one along y, one diagonal, one opposite.
  head.keys = {1, 0, 2, 0, 3, 0, 0, 1, 1, 1, -1, 0};
  SUBCASE("normalized mean anchor (default)") {
    Policy policy("keydiff");
    Floats scores = score_one(policy, head, 2);
    Floats expected = keydiff_reference(head.keys, 2, true);
    for (size_t i = 0; i < 6; ++i) CHECK(scores[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    // anchor ~ (0.451, 0.285), 32.2 degrees: the opposite key and the y key are kept.
    CHECK(scores[5] == doctest::Approx(0.8458).epsilon(1e-3));
    CHECK(scores[3] == doctest::Approx(-0.5329).epsilon(1e-3));
    CHECK(keep_top(scores, 2) == Ints{3, 5});
  }
  SUBCASE("the anchors differ when one key is large") {
    Head big = Head::positions(5);
    big.head_dim = 2;
    big.keys = {100, 0, 0, 1, 0, 1, 0, 1, 1, 0};
    Policy normalized("keydiff");
    Floats a = score_one(normalized, big, 2);
    Floats ea = keydiff_reference(big.keys, 2, true);
    for (size_t i = 0; i < 5; ++i) CHECK(a[i] == doctest::Approx(ea[i]).epsilon(1e-5));
    // anchor (0.4, 0.6): the x keys (0, 4) are the odd ones.
    CHECK(keep_top(a, 2) == Ints{0, 4});
    Policy mean("keydiff", {{"anchor", "mean"}});
    Floats b = score_one(mean, big, 2);
    Floats eb = keydiff_reference(big.keys, 2, false);
    for (size_t i = 0; i < 5; ++i) CHECK(b[i] == doctest::Approx(eb[i]).epsilon(1e-5));
    // anchor (20.2, 0.6) points along x: the y keys (equal scores) are kept, the later two.
    CHECK(keep_top(b, 2) == Ints{2, 3});
  }
  SUBCASE("a zero key scores 0, not NaN") {
    Policy policy("keydiff");
    Head z = Head::positions(3);
    z.head_dim = 2;
    z.keys = {0, 0, 1, 0, 0, 1};
    Floats scores = score_one(policy, z, 1);
    CHECK(scores[0] == 0.0f);
    CHECK(std::isfinite(scores[1]));
  }
}

TEST_CASE("random: reproducible, in [0, 1), independent of storage order") {
  Policy policy("random");
  Head head = Head::positions(200);
  Floats first = score_one(policy, head, 10);
  for (float s : first) {
    CHECK(s >= 0.0f);
    CHECK(s < 1.0f);
  }
  CHECK(score_one(policy, head, 10) == first);
  // Every other token (as after an eviction), in the same head: the same score per position.
  Head half;
  for (int32_t p = 0; p < 200; p += 2) half.pos.push_back(p);
  Floats subset = score_one(policy, half, 10);
  for (size_t i = 0; i < half.pos.size(); ++i) CHECK(subset[i] == first[half.pos[i]]);
  // A second instance with the same seed agrees; the kept set is a function of the positions.
  Policy again("random", {{"seed", "0"}});
  CHECK(score_one(again, head, 10) == first);
  Ints kept = keep_top(first, 10);
  CHECK(kept.size() == 10);
  // Other seeds, sequences, layers and heads draw other scores.
  Policy seeded("random", {{"seed", "42"}});
  CHECK(score_one(seeded, head, 10) != first);
  auto with = [&](int32_t seq, int32_t layer, int32_t kv_head) {
    std::vector<kvc_score_job> jobs{head.job(10, 0, 0, seq, layer, kv_head)};
    REQUIRE(policy.score(jobs) == KVC_OK);
    return head.scores;
  };
  CHECK(with(0, 0, 0) == first);
  CHECK(with(1, 0, 0) != first);
  CHECK(with(0, 1, 0) != first);
  CHECK(with(0, 0, 1) != first);
  // Roughly uniform.
  Head many = Head::positions(20000);
  Floats s = score_one(policy, many, 10);
  double mean = std::accumulate(s.begin(), s.end(), 0.0) / s.size();
  CHECK(mean == doctest::Approx(0.5).epsilon(0.03));
}

// ============================================================================ errors

TEST_CASE("bad parameters are KVC_ERR_CONFIG errors naming the key") {
  struct Case {
    std::string policy;
    Params params;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"snapkv", {{"kernel", "4"}}, "policy.params.kernel: expected an odd integer >= 1, got '4'"},
      {"snapkv", {{"kernel", "5.0"}}, "policy.params.kernel: expected an odd integer >= 1, got '5.0'"},
      {"snapkv", {{"kernel", "-1"}}, "policy.params.kernel: expected an odd integer >= 1, got '-1'"},
      {"snapkv", {{"foo", "1"}},
       "policy.params.foo: unknown parameter for snapkv (known: window, kernel, pooling)"},
      {"snapkv", {{"window", "0"}}, "policy.params.window: expected an integer in 1..2147483647, got '0'"},
      {"snapkv", {{"window", " 32"}}, "policy.params.window: expected an integer in 1..2147483647, got ' 32'"},
      {"snapkv", {{"window", "0x20"}}, "policy.params.window: expected an integer in 1..2147483647, got '0x20'"},
      {"snapkv", {{"window", "99999999999"}},
       "policy.params.window: expected an integer in 1..2147483647, got '99999999999'"},
      {"snapkv", {{"pooling", "min"}}, "policy.params.pooling: expected one of max, avg, got 'min'"},
      {"snapkv", {{"window", "8"}, {"window", "16"}}, "policy.params.window: given twice"},
      {"h2o", {{"recent_ratio", "1.5"}},
       "policy.params.recent_ratio: expected a number in [0, 1], got '1.5'"},
      {"h2o", {{"recent_ratio", "nan"}},
       "policy.params.recent_ratio: expected a number in [0, 1], got 'nan'"},
      {"h2o", {{"recent_ratio", ""}}, "policy.params.recent_ratio: expected a number in [0, 1], got ''"},
      {"h2o", {{"recent", "4"}}, "policy.params.recent: unknown parameter for h2o (known: recent_ratio)"},
      {"window", {{"size", "4"}}, "policy.params.size: unknown parameter for window (it takes no parameters)"},
      {"full", {{"x", "1"}}, "policy.params.x: unknown parameter for full (it takes no parameters)"},
      {"streaming", {{"sinks", "4"}},
       "policy.params.sinks: unknown parameter for streaming (it takes no parameters)"},
      {"tova", {{"x", "1"}}, "policy.params.x: unknown parameter for tova (it takes no parameters)"},
      {"knorm", {{"x", "1"}}, "policy.params.x: unknown parameter for knorm (it takes no parameters)"},
      {"keydiff", {{"anchor", "median"}},
       "policy.params.anchor: expected one of normalized_mean, mean, got 'median'"},
      {"random", {{"seed", "1.5"}}, "policy.params.seed: expected an integer (64-bit), got '1.5'"},
      {"pyramidkv", {{"beta", "0.5"}}, "policy.params.beta: expected a number >= 1, got '0.5'"},
      {"pyramidkv", {{"kernel", "2"}}, "policy.params.kernel: expected an odd integer >= 1, got '2'"},
      {"pyramidkv", {{"scorer", "h2o"}},
       "policy.params.scorer: unknown parameter for pyramidkv (known: window, kernel, pooling, beta)"},
      {"adakv", {{"floor", "2"}}, "policy.params.floor: expected a number in [0, 1], got '2'"},
      {"adakv", {{"scorer", ""}}, "policy.params.scorer: expected a non-empty name, got ''"},
      {"adakv", {{"scorer", "full"}},
       "policy.params.scorer: expected a policy that scores tokens, got 'full' (it only sets budgets)"},
      {"adakv", {{"scorer", "adakv"}},
       "policy.params.scorer: expected a policy that scores tokens, got 'adakv' (it only sets budgets)"},
      {"adakv", {{"kernel", "4"}}, "policy.params.kernel: expected an odd integer >= 1, got '4'"},
      {"adakv", {{"foo", "1"}},
       "policy.params.foo: unknown parameter for adakv with scorer snapkv (known: scorer, floor, "
       "window, kernel, pooling)"},
      {"adakv", {{"scorer", "h2o"}, {"window", "8"}},
       "policy.params.window: unknown parameter for adakv with scorer h2o (known: scorer, floor, "
       "recent_ratio)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.policy);
    CAPTURE(c.message);
    CreateResult r = try_create(c.policy, c.params);
    CHECK(r.code == KVC_ERR_CONFIG);
    CHECK(r.message == c.message);
  }
}

TEST_CASE("good parameters are accepted") {
  const std::vector<std::pair<std::string, Params>> cases = {
      {"snapkv", {{"window", "+64"}, {"kernel", "7"}, {"pooling", "avg"}}},
      {"h2o", {{"recent_ratio", "2.5e-1"}}},
      {"random", {{"seed", "-3"}}},
      {"random", {{"seed", "9223372036854775807"}}},
      {"pyramidkv", {{"beta", "1.5"}, {"window", "8"}, {"kernel", "3"}, {"pooling", "max"}}},
      {"adakv", {{"scorer", "tova"}, {"floor", "0"}}},
      {"adakv", {{"scorer", "keydiff"}, {"anchor", "mean"}}},
      {"adakv", {{"scorer", "third_party"}, {"anything", "goes"}}},
      {"keydiff", {{"anchor", "normalized_mean"}}},
  };
  for (const auto& c : cases) {
    const std::string& name = c.first;
    const Params& params = c.second;
    CAPTURE(name);
    CreateResult r = try_create(name, params);
    CHECK(r.code == KVC_OK);
    CHECK(r.message == "");
  }
}

TEST_CASE("missing inputs are KVC_ERR_INVALID_ARGUMENT, not a crash") {
  const Plugin& p = plugin("snapkv");
  kvc_plugin_error error{};
  CHECK(p.vtable->create(&kHost, nullptr, 0, nullptr, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK(p.vtable->create(&kHost, nullptr, 2, reinterpret_cast<void**>(&error), &error) ==
        KVC_ERR_INVALID_ARGUMENT);
  struct Case {
    std::string policy;
    const char* text;
  };
  for (const Case& c : {Case{"h2o", "attn_sum is NULL"}, Case{"tova", "attn_last is NULL"},
                        Case{"snapkv", "attn_window is NULL"}, Case{"knorm", "keys is NULL"},
                        Case{"keydiff", "keys is NULL"}}) {
    CAPTURE(c.policy);
    Policy policy(c.policy);
    Head head = Head::positions(4);
    std::vector<kvc_score_job> jobs{head.job(2, 0, 0, 0, 3, 1)};
    std::string message;
    CHECK(policy.score(jobs, &message) == KVC_ERR_INVALID_ARGUMENT);
    CHECK(message.find(c.text) != std::string::npos);
    CHECK(message.find("layer 3, KV head 1") != std::string::npos);
  }
  Policy adakv("adakv");
  Head head = Head::positions(4);
  std::vector<kvc_score_job> jobs{head.job(2)};
  jobs[0].scores = nullptr;
  Ints configured{2};
  kvc_budget_request request = request_for(jobs, configured, 0, 1);
  int32_t out = 0;
  CHECK(adakv.vtable().budgets(nullptr, &request, &out, &error) == KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("score jobs of an older, smaller struct_size are read by their own stride") {
  // A plugin ABI 1.0 host: its score jobs end before sink_end and are strided by that size.
  constexpr size_t kOldSize = offsetof(kvc_score_job, sink_end);
  Head a = Head::positions(6), b = Head::positions(4);
  std::vector<kvc_score_job> full{a.job(3), b.job(3)};
  std::vector<unsigned char> packed(kOldSize * full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    full[i].struct_size = kOldSize;
    std::memcpy(packed.data() + i * kOldSize, &full[i], kOldSize);
  }
  const auto* old_jobs = reinterpret_cast<const kvc_score_job*>(packed.data());
  Policy window("window");
  kvc_plugin_error error{};
  REQUIRE(is_set(window.vtable().score));
  void* instance = nullptr;
  REQUIRE(window.vtable().create(&kHost, nullptr, 0, &instance, &error) == KVC_OK);
  CHECK(window.vtable().score(instance, old_jobs, full.size(), &error) == KVC_OK);
  window.vtable().destroy(instance);
  CHECK(a.scores == Floats{0, 1, 2, 3, 4, 5});
  CHECK(b.scores == Floats{0, 1, 2, 3});

  // A policy that sets budgets from the host's protected range refuses such a host clearly.
  Policy adakv("adakv", {{"scorer", "window"}});
  REQUIRE(adakv.vtable().create(&kHost, nullptr, 0, &instance, &error) == KVC_OK);
  const Ints configured{3, 3};
  kvc_budget_request request = request_for(full, configured, 0, 1);
  request.jobs = old_jobs;
  std::vector<int32_t> budgets(2);
  CHECK(adakv.vtable().budgets(instance, &request, budgets.data(), &error) == KVC_ERR_PLUGIN);
  CHECK(std::string(error.message).find("plugin ABI 1.1") != std::string::npos);
  adakv.vtable().destroy(instance);
}

TEST_CASE("an empty head scores nothing") {
  for (const char* name : {"window", "streaming", "h2o", "tova", "snapkv", "knorm", "keydiff", "random"}) {
    CAPTURE(name);
    Policy policy(name);
    kvc_score_job job{};
    job.struct_size = sizeof job;
    job.head_dim = 4;
    std::vector<kvc_score_job> jobs{job};
    CHECK(policy.score(jobs) == KVC_OK);
  }
}

TEST_CASE("score runs concurrently on one instance") {
  for (const char* name : {"keydiff", "snapkv", "random"}) {
    CAPTURE(name);
    Policy policy(name);
    constexpr int kThreads = 8;
    std::vector<Head> heads(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      Head& h = heads[t];
      h = Head::positions(257 + t);
      h.head_dim = 16;
      for (size_t i = 0; i < h.pos.size(); ++i) {
        h.attn_window.push_back(static_cast<float>((i * 37 + t) % 101) / 101.0f);
        for (int d = 0; d < 16; ++d) h.keys.push_back(std::sin(0.1f * i + d + t));
      }
    }
    std::vector<Floats> serial;
    for (Head& h : heads) serial.push_back(score_one(policy, h, 10));
    for (int round = 0; round < 4; ++round) {
      std::vector<int32_t> codes(kThreads, -1);
      std::vector<std::vector<kvc_score_job>> jobs(kThreads);
      for (int t = 0; t < kThreads; ++t) jobs[t] = {heads[t].job(10, 0, 0, t)};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] { codes[t] = policy.score(jobs[t]); });
      }
      for (std::thread& th : threads) th.join();
      for (int t = 0; t < kThreads; ++t) {
        CHECK(codes[t] == KVC_OK);
        if (std::string(name) != "random") CHECK(heads[t].scores == serial[t]);
      }
    }
  }
}

// ============================================================================ common library

TEST_CASE("ParamReader parses integers, numbers and choices in the configuration's style") {
  using kvc::policies::ParamReader;
  std::vector<kvc_policy_param> params = {{"a", "-12"}, {"b", "2.5e0"}, {"c", "avg"}, {"d", "x"}};
  ParamReader reader("demo", params.data(), params.size());
  CHECK(reader.integer("a", 0, -100, 100) == -12);
  CHECK(reader.number("b", 0, 0, 10) == 2.5);
  CHECK(reader.choice("c", 0, {"max", "avg"}) == 1);
  CHECK(reader.integer("missing", 7, 0, 10) == 7);
  try {
    reader.finish();
    FAIL("finish accepted an unknown key");
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_CONFIG);
    CHECK(std::string(e.what()) == "policy.params.d: unknown parameter for demo (known: a, b, c, missing)");
  }
  std::vector<kvc_policy_param> bad = {{"n", "12"}};
  ParamReader range("demo", bad.data(), bad.size());
  try {
    range.integer("n", 0, 1, 10);
    FAIL("accepted 12 in 1..10");
  } catch (const kvc::Error& e) {
    CHECK(std::string(e.what()) == "policy.params.n: expected an integer in 1..10, got '12'");
  }
}

// Each key was looked for among all before it: 2e5 parameters took 71 s. The suite's timeout
// catches that; a hash index takes them in about a tenth of a second.
TEST_CASE("ParamReader takes a great many parameters and finds the one given twice") {
  using kvc::policies::ParamReader;
  std::vector<std::string> keys;
  for (int i = 0; i < 300000; ++i) keys.push_back("key" + std::to_string(i));
  keys.push_back("key17");
  std::vector<kvc_policy_param> params;
  for (const std::string& key : keys) params.push_back({key.c_str(), "1"});
  try {
    ParamReader reader("demo", params.data(), params.size());
    FAIL("a key given twice was accepted");
  } catch (const kvc::Error& e) {
    CHECK(std::string(e.what()) == "policy.params.key17: given twice");
  }
  params.pop_back();
  ParamReader reader("demo", params.data(), params.size());
  CHECK(reader.integer("key299999", 0, 0, 10) == 1);
  CHECK(reader.has("key123456"));
  CHECK(!reader.has("key300000"));
}

TEST_CASE("long error messages are cut to the ABI's buffer") {
  std::string key(600, 'k');
  CreateResult r = try_create("window", {{key, "1"}});
  CHECK(r.code == KVC_ERR_CONFIG);
  CHECK(r.message.size() == sizeof(kvc_plugin_error::message) - 1);
  CHECK(r.message.rfind("policy.params.kkk", 0) == 0);
}
