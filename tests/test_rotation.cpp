// The rotation of K (kvc_cache_params::k_rotation, kvcache/kvcache_rotation.h): the transform
// itself, attention over rotated keys against the unrotated double reference, what it buys
// 4-bit keys with an outlier channel, export/import, YAML and refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_backend_plugin.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_rotation.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += double(a[i]) * b[i];
  return sum;
}

// The cpu backend rotates K; the suites' other backends are checked for refusing it below.
kvc_cache_params rotated_params(int32_t head_dim, kvc_dtype k_dtype, int32_t rotation) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = 2;
  p.q_heads = 4;
  p.head_dim = head_dim;
  p.dtype = KVC_DTYPE_F32;
  p.k_dtype = k_dtype;
  p.k_rotation = rotation;
  p.block_tokens = 5;
  p.memory_limit = 8 << 20;
  p.backend = "cpu";
  return p;
}

// Appends and attends `n` tokens of sequence 0 at positions [first, first + n), all rows f32
// ([n][heads][head_dim]); returns the output rows.
std::vector<float> append_attend(kvc_cache* cache, const kvc_cache_params& p, int32_t first,
                                 int32_t n, const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = first + i;
  const int32_t seq = 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, pos.data());
  std::vector<float> out(static_cast<size_t>(n) * static_cast<size_t>(p.q_heads * p.head_dim));
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  kvc_tensor_mut ot = kvt::tensor_mut(out.data());
  KVT_REQUIRE_OK(kvc_append_attend(cache, 0, &batch, &qt, &kt, &vt, nullptr, &ot));
  return out;
}

// The largest |out - reference| over n tokens appended at [first, first + n) after `history`
// (which gets them), the reference over the rows as given.
double worst_error(ref::History& history, const kvc_cache_params& p, int32_t first, int32_t n,
                   const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& out) {
  const size_t kv_row = static_cast<size_t>(p.kv_heads * p.head_dim);
  const size_t q_row = static_cast<size_t>(p.q_heads * p.head_dim);
  double worst = 0.0;
  std::vector<double> expect(q_row);
  for (int32_t t = 0; t < n; ++t) {
    const size_t i = static_cast<size_t>(t);
    history.append(first + t, &k[i * kv_row], &v[i * kv_row]);
    ref::attend(history, p.q_heads, &q[i * q_row], first + t, ref::Options{}, expect.data());
    for (size_t e = 0; e < q_row; ++e) {
      worst = std::max(worst, std::fabs(double(out[i * q_row + e]) - expect[e]));
    }
  }
  return worst;
}

// Backend classes of the C++ plugin skeleton: one that applies the rotation, one that does not
// (as the cuda backend).
struct RotatingBackend {
  static constexpr bool kRotatesK = true;
};
struct PlainBackend {};

// n values of K rows of head_dim values in [-1, 1], `outlier` added to channel 3 of every row
// (the channels some models' keys carry far above the others).
std::vector<float> keys_with_outlier(ref::Rng& rng, size_t n, float outlier, int32_t head_dim) {
  std::vector<float> keys = rng.vec(n);
  for (size_t i = 3; i < n; i += static_cast<size_t>(head_dim)) keys[i] += outlier;
  return keys;
}

}  // namespace

TEST_CASE("rotation: the Hadamard transform is orthonormal, its own inverse, by blocks") {
  CHECK(kvc_rotation_block(64) == 64);
  CHECK(kvc_rotation_block(128) == 128);
  CHECK(kvc_rotation_block(96) == 32);
  CHECK(kvc_rotation_block(80) == 16);
  CHECK(kvc_rotation_block(33) == 1);
  CHECK(std::string(kvc_rotation_name(KVC_ROTATION_HADAMARD)) == "hadamard");
  CHECK(std::string(kvc_rotation_name(KVC_ROTATION_NONE)) == "none");
  CHECK(std::string(kvc_rotation_name(2)) == "unknown");
  CHECK(!kvc_rotation_is_valid(2));
  CHECK(!kvc_rotation_is_valid(-1));

  // H_4 / 2 by hand.
  float four[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  kvc_rotation_apply(KVC_ROTATION_HADAMARD, four, 4);
  CHECK(four[0] == 5.0f);
  CHECK(four[1] == -1.0f);
  CHECK(four[2] == -2.0f);
  CHECK(four[3] == 0.0f);
  // Two blocks of 2 in a row of 6: each (a, b) becomes ((a + b), (a - b)) / sqrt(2).
  float six[6] = {1.0f, 1.0f, 2.0f, 0.0f, 0.0f, 4.0f};
  kvc_rotation_apply(KVC_ROTATION_HADAMARD, six, 6);
  const float r2 = std::sqrt(2.0f);
  CHECK(six[0] == doctest::Approx(r2));
  CHECK(six[1] == doctest::Approx(0.0));
  CHECK(six[2] == doctest::Approx(r2));
  CHECK(six[3] == doctest::Approx(r2));
  CHECK(six[4] == doctest::Approx(2 * r2));
  CHECK(six[5] == doctest::Approx(-2 * r2));

  ref::Rng rng(7);
  // Against the definition, H (i, j) = (-1)^popcount(i & j) / sqrt(b), in double: blocks of 16
  // (a row of 48) and of 128.
  for (int32_t d : {48, 128}) {
    CAPTURE(d);
    const int32_t b = kvc_rotation_block(d);
    const std::vector<float> x = rng.vec(size_t(d));
    std::vector<float> rotated = x;
    kvc_rotation_apply(KVC_ROTATION_HADAMARD, rotated.data(), d);
    for (int32_t i = 0; i < d; ++i) {
      const int32_t start = i / b * b;
      double expected = 0.0;
      for (int32_t j = 0; j < b; ++j) {
        const int sign = __builtin_popcount(unsigned((i - start) & j)) % 2 ? -1 : 1;
        expected += sign * double(x[size_t(start + j)]);
      }
      expected /= std::sqrt(double(b));
      CHECK(rotated[size_t(i)] == doctest::Approx(expected).epsilon(1e-5).scale(1.0));
    }
  }
  for (int32_t d : {1, 2, 33, 64, 96, 128, 1024}) {
    CAPTURE(d);
    const std::vector<float> a = rng.vec(size_t(d)), b = rng.vec(size_t(d));
    std::vector<float> ra = a, rb = b;
    kvc_rotation_apply(KVC_ROTATION_HADAMARD, ra.data(), d);
    kvc_rotation_apply(KVC_ROTATION_HADAMARD, rb.data(), d);
    CHECK(dot(ra, ra) == doctest::Approx(dot(a, a)).epsilon(1e-5));
    CHECK(std::fabs(dot(ra, rb) - dot(a, b)) <= 1e-5 * d);
    kvc_rotation_apply(KVC_ROTATION_HADAMARD, ra.data(), d);
    for (size_t i = 0; i < a.size(); ++i) CHECK(ra[i] == doctest::Approx(a[i]).epsilon(1e-5));
    std::vector<float> same = a;
    kvc_rotation_apply(KVC_ROTATION_NONE, same.data(), d);
    CHECK(same == a);
  }
}

TEST_CASE("rotation: attention over rotated f32 keys equals the unrotated reference") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (int32_t d : {64, 96}) {
    CAPTURE(d);
    const kvc_cache_params p = rotated_params(d, KVC_DTYPE_F32, KVC_ROTATION_HADAMARD);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    ref::History history(p.kv_heads, d);
    ref::Rng rng(11);
    const size_t kv_row = size_t(p.kv_heads * d), q_row = size_t(p.q_heads * d);
    int32_t first = 0;
    // A prefill chunk, then decode steps.
    for (int32_t n : {13, 1, 1, 7, 1}) {
      const std::vector<float> q = rng.vec(size_t(n) * q_row), k = rng.vec(size_t(n) * kv_row),
                               v = rng.vec(size_t(n) * kv_row);
      const std::vector<float> out = append_attend(cache.get(), p, first, n, q, k, v);
      CHECK(worst_error(history, p, first, n, q, k, v, out) <= 1e-5);
      first += n;
    }
    // The stored rows are the engine's rotated, by the same function.
    kvc_segment_view view;
    size_t count = 0;
    KVT_REQUIRE_OK(kvc_seq_view(cache.get(), 0, 0, 1, &view, 1, &count));
    std::vector<float> row(history.k.begin() + d, history.k.begin() + 2 * d);  // token 0, head 1
    kvc_rotation_apply(KVC_ROTATION_HADAMARD, row.data(), d);
    CHECK(std::memcmp(view.k, row.data(), row.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("rotation: q4_0 keys with an outlier channel come closer to the reference rotated") {
  kvt::ContextPtr ctx = kvt::make_context();
  const int32_t d = 64;
  double error[2] = {0.0, 0.0};
  for (int32_t rotation : {KVC_ROTATION_NONE, KVC_ROTATION_HADAMARD}) {
    const kvc_cache_params p = rotated_params(d, KVC_DTYPE_Q4_0, rotation);
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    ref::Rng rng(5);
    ref::History history(p.kv_heads, d);
    const size_t kv_row = size_t(p.kv_heads * d), q_row = size_t(p.q_heads * d);
    int32_t first = 0;
    // A prefill (blocks of f32 tiles) and decode steps (the kernels that read the stored rows
    // in place).
    for (int32_t n : {48, 1, 1, 1}) {
      std::vector<float> q = rng.vec(size_t(n) * q_row);
      for (float& x : q) x *= 4.0f;  // logits far enough apart that the weights are uneven
      const std::vector<float> k = keys_with_outlier(rng, size_t(n) * kv_row, 12.0f, d);
      const std::vector<float> v = rng.vec(size_t(n) * kv_row);
      const std::vector<float> out = append_attend(cache.get(), p, first, n, q, k, v);
      error[rotation] =
          std::max(error[rotation], worst_error(history, p, first, n, q, k, v, out));
      first += n;
    }
  }
  INFO("worst error without rotation " << error[0] << ", with " << error[1]);
  CHECK(error[1] < 0.5 * error[0]);
}

TEST_CASE("rotation: a rotated sequence exports as version 4, imports only into a rotated cache") {
  kvt::ContextPtr ctx = kvt::make_context();
  const int32_t d = 64, n = 9;
  const kvc_cache_params rotated = rotated_params(d, KVC_DTYPE_Q4_0, KVC_ROTATION_HADAMARD);
  const kvc_cache_params plain = rotated_params(d, KVC_DTYPE_Q4_0, KVC_ROTATION_NONE);
  ref::Rng rng(3);
  const size_t kv_row = size_t(rotated.kv_heads * d), q_row = size_t(rotated.q_heads * d);
  const std::vector<float> q = rng.vec(size_t(n) * q_row), k = rng.vec(size_t(n) * kv_row),
                           v = rng.vec(size_t(n) * kv_row);
  const auto exported = [](kvc_cache* cache) {
    size_t size = 0, written = 0;
    KVT_REQUIRE_OK(kvc_seq_export_size(cache, 0, &size));
    std::vector<uint8_t> bytes(size);
    KVT_REQUIRE_OK(kvc_seq_export(cache, 0, bytes.data(), bytes.size(), &written));
    CHECK(written == size);
    return bytes;
  };
  const auto version = [](const std::vector<uint8_t>& bytes) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= uint32_t(bytes[8 + size_t(b)]) << (8 * b);
    return v;
  };

  kvt::CachePtr source = kvt::make_cache(ctx.get(), rotated);
  KVT_REQUIRE_OK(kvc_seq_create(source.get(), 0));
  const std::vector<float> first = append_attend(source.get(), rotated, 0, n, q, k, v);
  const std::vector<uint8_t> image = exported(source.get());
  CHECK(version(image) == 4);

  // Into a rotated cache: the same rows, so the next token's attention is the same.
  kvt::CachePtr copy = kvt::make_cache(ctx.get(), rotated);
  KVT_REQUIRE_OK(kvc_seq_import(copy.get(), 0, image.data(), image.size()));
  CHECK(exported(copy.get()) == image);
  const std::vector<float> q1 = rng.vec(q_row), k1 = rng.vec(kv_row), v1 = rng.vec(kv_row);
  CHECK(append_attend(copy.get(), rotated, n, 1, q1, k1, v1) ==
        append_attend(source.get(), rotated, n, 1, q1, k1, v1));

  // Across rotations, either way: refused, naming both, nothing created.
  kvt::CachePtr other = kvt::make_cache(ctx.get(), plain);
  kvt::Status refused{kvc_seq_import(other.get(), 0, image.data(), image.size())};
  CHECK(refused.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(refused.message(), "k_rotation hadamard"));
  CHECK(kvt::contains(refused.message(), "with none"));
  KVT_REQUIRE_OK(kvc_seq_create(other.get(), 0));  // the refused import created nothing
  (void)append_attend(other.get(), plain, 0, n, q, k, v);
  const std::vector<uint8_t> unrotated = exported(other.get());
  CHECK(version(unrotated) == 2);  // K and V of two formats, no rotation
  kvt::Status back{kvc_seq_import(copy.get(), 5, unrotated.data(), unrotated.size())};
  CHECK(back.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(back.message(), "k_rotation none"));
}

TEST_CASE("rotation: YAML cache.k_rotation, read back, unknown names refused") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache* raw = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(
      ctx.get(), "cache: {head_dim: 64, k_dtype: q4_0, k_rotation: hadamard}\n", &raw));
  kvt::CachePtr cache(raw);
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache.get(), &p));
  CHECK(p.k_rotation == KVC_ROTATION_HADAMARD);
  CHECK(p.k_dtype == KVC_DTYPE_Q4_0);

  raw = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(ctx.get(), "cache: {k_rotation: none}\n", &raw));
  kvt::CachePtr none(raw);
  KVT_REQUIRE_OK(kvc_cache_get_params(none.get(), &p));
  CHECK(p.k_rotation == KVC_ROTATION_NONE);

  raw = nullptr;
  kvt::Status bad{kvc_cache_create_from_yaml(ctx.get(), "cache: {k_rotation: sideways}\n", &raw)};
  CHECK(bad.code() == KVC_ERR_CONFIG);
  CHECK(kvt::contains(bad.message(), "k_rotation"));
  CHECK(kvt::contains(bad.message(), "hadamard"));
  CHECK(raw == nullptr);
}

TEST_CASE("rotation: a bad k_rotation is refused; an older caller's struct has none") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = rotated_params(64, KVC_DTYPE_F32, 2);
  kvc_cache* raw = nullptr;
  kvt::Status st{kvc_cache_create(ctx.get(), &p, &raw)};
  CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(st.message(), "k_rotation is not a kvc_rotation"));
  CHECK(raw == nullptr);

  // A struct_size that ends before k_rotation: whatever its bytes hold, no rotation.
  p.struct_size = static_cast<uint32_t>(offsetof(kvc_cache_params, k_rotation));
  p.k_rotation = 2;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  kvc_cache_params back;
  kvc_cache_params_init(&back);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache.get(), &back));
  CHECK(back.k_rotation == KVC_ROTATION_NONE);
}

TEST_CASE("rotation: backends that cannot rotate K refuse it when the cache is created") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_COUNTING_1_0_PLUGIN));
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_STRICT_PLUGIN));
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_CONFIG_PROBE_PLUGIN));
  const struct {
    const char* backend;
    const char* says;
  } cases[] = {
      {"counting_1_0", "plugin ABI 1.0, which cannot rotate K (k_rotation hadamard needs 1.5)"},
      {"strict", "has no create_with_config, which k_rotation hadamard needs"},
      {"config_probe", "this backend does not rotate K"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.backend);
    kvc_cache_params p = rotated_params(64, KVC_DTYPE_F32, KVC_ROTATION_HADAMARD);
    p.backend = c.backend;
    kvc_cache* raw = nullptr;
    kvt::Status st{kvc_cache_create(ctx.get(), &p, &raw)};
    CHECK(st.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(st.message(), c.backend));
    CHECK(kvt::contains(st.message(), c.says));
    CHECK(raw == nullptr);
    p.k_rotation = KVC_ROTATION_NONE;  // the same backend without rotation is fine
    kvt::CachePtr fine = kvt::make_cache(ctx.get(), p);
  }
}

TEST_CASE("rotation: the plugin skeleton refuses it for a backend class that does not rotate") {
  kvc_backend_config config{};
  config.struct_size = sizeof config;
  config.k_rotation = KVC_ROTATION_HADAMARD;
  CHECK_NOTHROW(kvc::plugin::check_rotation<RotatingBackend>(config));
  try {
    kvc::plugin::check_rotation<PlainBackend>(config);
    FAIL("accepted");
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(e.what(), "k_rotation hadamard: this backend does not rotate K"));
  }
  config.k_rotation = KVC_ROTATION_NONE;
  CHECK_NOTHROW(kvc::plugin::check_rotation<PlainBackend>(config));
}
