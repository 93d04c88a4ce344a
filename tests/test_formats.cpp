// The format table (kvcache/kvcache_format.h, kvc_format_describe) against hand-computed
// values, and caches whose K and V are stored in different formats: parameters, views,
// memory and export/import.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

kvc_cache_params mixed_params(int32_t k, int32_t v) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = 1;
  p.head_dim = 33;
  p.dtype = KVC_DTYPE_BF16;  // overridden for both
  p.k_dtype = k;
  p.v_dtype = v;
  p.block_tokens = 3;
  p.memory_limit = 1 << 20;
  return p;
}

// Appends n tokens at positions 0..n-1 of sequence 0, layer 0 (one KV head), as f32.
void append_tokens(kvc_cache* cache, const std::vector<float>& k, const std::vector<float>& v,
                   int32_t n) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i;
  const int32_t seq = 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, pos.data());
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  KVT_REQUIRE_OK(kvc_append(cache, 0, &batch, &kt, &vt));
}

// The stored rows of sequence 0 as f32, decoded by the table from kvc_seq_view's segments.
void viewed_rows(kvc_cache* cache, std::vector<float>& k, std::vector<float>& v) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache, &p));
  const size_t d = static_cast<size_t>(p.head_dim);
  const size_t k_row = kvc_format_row_bytes(p.k_dtype, d);
  const size_t v_row = kvc_format_row_bytes(p.v_dtype, d);
  size_t count = 0;
  KVT_REQUIRE_OK(kvc_seq_view(cache, 0, 0, 0, nullptr, 0, &count));
  std::vector<kvc_segment_view> views(count);
  KVT_REQUIRE_OK(kvc_seq_view(cache, 0, 0, 0, views.data(), count, &count));
  k.clear();
  v.clear();
  std::vector<float> row(d);
  for (const kvc_segment_view& view : views) {
    for (int32_t t = 0; t < view.count; ++t) {
      REQUIRE(kvc_format_row_to_f32(p.k_dtype, static_cast<const char*>(view.k) + t * k_row,
                                    row.data(), d));
      k.insert(k.end(), row.begin(), row.end());
      REQUIRE(kvc_format_row_to_f32(p.v_dtype, static_cast<const char*>(view.v) + t * v_row,
                                    row.data(), d));
      v.insert(v.end(), row.begin(), row.end());
    }
  }
}

std::vector<uint8_t> exported(kvc_cache* cache) {
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, 0, &size));
  std::vector<uint8_t> bytes(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache, 0, bytes.data(), bytes.size(), &written));
  CHECK(written == size);
  return bytes;
}

std::vector<float> rounded(const std::vector<float>& values, kvc_dtype dtype) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = ref::round_to_dtype(values[i], dtype);
  return out;
}

}  // namespace

TEST_CASE("formats: the table's sizes and names, inline and through kvc_format_describe") {
  const struct {
    kvc_dtype format;
    const char* name;
    uint32_t group_bytes;
  } table[] = {{KVC_DTYPE_F32, "f32", 4}, {KVC_DTYPE_F16, "f16", 2}, {KVC_DTYPE_BF16, "bf16", 2}};
  for (const auto& e : table) {
    CAPTURE(e.name);
    CHECK(kvc_format_is_valid(e.format));
    CHECK(e.format < KVC_FORMAT_CODE_END);
    CHECK(std::string(kvc_format_name(e.format)) == e.name);
    CHECK(kvc_format_group_size(e.format) == 1);
    CHECK(kvc_format_group_bytes(e.format) == e.group_bytes);
    CHECK(kvc_format_row_bytes(e.format, 128) == 128 * e.group_bytes);
    CHECK(kvc_format_row_bytes(e.format, 0) == 0);
    CHECK(kvc_dtype_size(e.format) == e.group_bytes);
    kvc_format_info info;
    std::memset(&info, 0xab, sizeof info);
    info.struct_size = sizeof info;
    KVT_REQUIRE_OK(kvc_format_describe(e.format, &info));
    CHECK(info.struct_size == sizeof info);
    CHECK(info.format == e.format);
    CHECK(std::string(info.name) == e.name);
    CHECK(info.group_size == 1);
    CHECK(info.group_bytes == e.group_bytes);
  }
  const struct {
    kvc_dtype format;
    const char* name;
    uint32_t group_bytes;
    size_t row_bytes_128;
  } quantized[] = {{KVC_DTYPE_Q8_0, "q8_0", 34, 136}, {KVC_DTYPE_Q4_0, "q4_0", 18, 72}};
  for (const auto& e : quantized) {
    CAPTURE(e.name);
    CHECK(kvc_format_is_valid(e.format));
    CHECK(kvc_format_has_scales(e.format));
    CHECK(std::string(kvc_format_name(e.format)) == e.name);
    CHECK(kvc_format_group_size(e.format) == 32);
    CHECK(kvc_format_group_bytes(e.format) == e.group_bytes);
    CHECK(kvc_format_row_bytes(e.format, 128) == e.row_bytes_128);
    CHECK(kvc_format_row_bytes(e.format, 40) == 0);  // not whole groups
    CHECK(kvc_dtype_size(e.format) == 0);
    kvc_format_info info;
    info.struct_size = sizeof info;
    KVT_REQUIRE_OK(kvc_format_describe(e.format, &info));
    CHECK(std::string(info.name) == e.name);
    CHECK(info.group_size == 32);
    CHECK(info.group_bytes == e.group_bytes);
  }
  for (int raw : {-1, KVC_FORMAT_CODE_END, 999}) {
    CAPTURE(raw);
    CHECK_FALSE(kvc_format_is_valid(raw));
    CHECK(kvc_format_group_size(raw) == 0);
    CHECK(kvc_format_group_bytes(raw) == 0);
    CHECK(kvc_format_row_bytes(raw, 64) == 0);
    CHECK(std::string(kvc_format_name(raw)) == "unknown");
    float f = 1.0f;
    unsigned char row[4] = {1, 2, 3, 4};
    CHECK_FALSE(kvc_format_row_to_f32(raw, row, &f, 1));
    CHECK_FALSE(kvc_format_row_from_f32(raw, &f, row, 1));
    CHECK(f == 1.0f);
    CHECK(row[0] == 1);
  }
}

TEST_CASE("formats: the reference row conversions, bit for bit") {
  const float values[3] = {1.0f, -2.5f, 65504.0f};
  unsigned char row[12];
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_F16, values, row, 3));
  uint16_t h[3];
  std::memcpy(h, row, 6);
  CHECK(h[0] == 0x3c00);
  CHECK(h[1] == 0xc100);
  CHECK(h[2] == 0x7bff);
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_BF16, values, row, 3));
  std::memcpy(h, row, 6);
  CHECK(h[0] == 0x3f80);
  CHECK(h[1] == 0xc020);
  CHECK(h[2] == 0x4780);  // 65504 rounds to 65536 in bf16
  float back[3];
  REQUIRE(kvc_format_row_to_f32(KVC_DTYPE_BF16, row, back, 3));
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == -2.5f);
  CHECK(back[2] == 65536.0f);
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_F32, values, row, 3));
  REQUIRE(kvc_format_row_to_f32(KVC_DTYPE_F32, row, back, 3));
  CHECK(std::memcmp(back, values, sizeof values) == 0);
}

TEST_CASE("formats: which tensors each format takes as input") {
  const kvc_dtype plain[] = {KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16};
  for (kvc_dtype storage : plain) {
    for (kvc_dtype input : plain) {
      CAPTURE(kvc_format_name(storage));
      CAPTURE(kvc_format_name(input));
      CHECK(kvc_format_takes_input(storage, input) ==
            (input == KVC_DTYPE_F32 || input == storage));
    }
    CHECK_FALSE(kvc_format_takes_input(storage, KVC_DTYPE_Q8_0));
  }
  for (kvc_dtype storage : {KVC_DTYPE_Q8_0, KVC_DTYPE_Q4_0}) {
    for (kvc_dtype input : plain) CHECK(kvc_format_takes_input(storage, input));
    CHECK(kvc_format_takes_input(storage, storage));  // stored rows, as an import passes them
    CHECK_FALSE(kvc_format_takes_input(storage, storage == KVC_DTYPE_Q8_0 ? KVC_DTYPE_Q4_0
                                                                           : KVC_DTYPE_Q8_0));
  }
  CHECK_FALSE(kvc_format_takes_input(KVC_FORMAT_CODE_END, KVC_DTYPE_F32));
  CHECK_FALSE(kvc_format_takes_input(KVC_DTYPE_Q8_0, -1));
}

TEST_CASE("formats: q8_0 and q4_0 groups, byte for byte") {
  // q8_0: the largest magnitude 127 makes the scale 1 (f16 0x3c00, little-endian); halves
  // round away from zero.
  float x[32] = {127.0f, -127.0f, 0.5f, -0.5f, 2.49f, 3.0f};
  unsigned char q8[34];
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q8_0, x, q8, 32));
  const unsigned char q8_expected[8] = {0x00, 0x3c, 0x7f, 0x81, 0x01, 0xff, 0x02, 0x03};
  CHECK(std::memcmp(q8, q8_expected, sizeof q8_expected) == 0);
  for (size_t i = 8; i < sizeof q8; ++i) CHECK(q8[i] == 0);
  float back[32];
  REQUIRE(kvc_format_row_to_f32(KVC_DTYPE_Q8_0, q8, back, 32));
  const float q8_values[6] = {127.0f, -127.0f, 1.0f, -1.0f, 2.0f, 3.0f};
  for (int i = 0; i < 6; ++i) CHECK(back[i] == q8_values[i]);

  // q4_0: the value of largest magnitude, -16, makes the scale -16 / -8 = 2 (f16 0x4000);
  // byte j holds value j (low bits) and value j + 16 (high bits), each stored plus 8.
  float y[32] = {-16.0f, 14.0f};
  y[16] = 1.0f;   // 0.5 steps: rounds away from zero to 1, stored 9
  y[17] = 15.0f;  // 7.5 steps: rounds to 8, clamped to 7, stored 15
  unsigned char q4[18];
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q4_0, y, q4, 32));
  const unsigned char q4_expected[4] = {0x00, 0x40, 0x90, 0xff};
  CHECK(std::memcmp(q4, q4_expected, sizeof q4_expected) == 0);
  for (size_t i = 4; i < sizeof q4; ++i) CHECK(q4[i] == 0x88);
  REQUIRE(kvc_format_row_to_f32(KVC_DTYPE_Q4_0, q4, back, 32));
  CHECK(back[0] == -16.0f);
  CHECK(back[1] == 14.0f);
  CHECK(back[16] == 2.0f);
  CHECK(back[17] == 14.0f);
  CHECK(back[2] == 0.0f);

  // A group of zeros has scale 0 and decodes to zeros; a scale beyond f16 saturates.
  const float zeros[32] = {};
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q8_0, zeros, q8, 32));
  REQUIRE(kvc_format_row_to_f32(KVC_DTYPE_Q8_0, q8, back, 32));
  for (float b : back) CHECK(b == 0.0f);
  float huge[32] = {1e8f};
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q8_0, huge, q8, 32));
  CHECK(q8[0] == 0xff);  // 65504 = f16 0x7bff
  CHECK(q8[1] == 0x7b);
  CHECK(q8[2] == 0x7f);
  // Beyond the range of int, and NaN (which does not count towards the scale): defined too.
  float beyond[32] = {1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q8_0, beyond, q8, 32));
  CHECK(q8[2] == 0x7f);
  CHECK(q8[3] == 0x81);  // -127
  CHECK(q8[4] == 0);
  REQUIRE(kvc_format_row_from_f32(KVC_DTYPE_Q4_0, beyond, q4, 32));
  CHECK((q4[2] & 0x0f) == 0);  // the extreme 1e30 is -8 steps
  CHECK((q4[3] & 0x0f) == 15);  // -1e30: +7 steps, clamped
  CHECK((q4[4] & 0x0f) == 8);   // NaN: 0
}

TEST_CASE("formats: q8_0 and q4_0 round trips stay within their bounds") {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 4096;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = normal(random) * (i % 64 < 32 ? 1.0f : 30.0f);
  for (kvc_dtype format : {KVC_DTYPE_Q8_0, KVC_DTYPE_Q4_0}) {
    CAPTURE(kvc_format_name(format));
    std::vector<unsigned char> row(kvc_format_row_bytes(format, n));
    REQUIRE(kvc_format_row_from_f32(format, x.data(), row.data(), n));
    REQUIRE(kvc_format_row_to_f32(format, row.data(), y.data(), n));
    const size_t group_bytes = kvc_format_group_bytes(format);
    for (size_t g = 0; g < n / 32; ++g) {
      uint16_t bits;
      const unsigned char* group = row.data() + g * group_bytes;
      bits = static_cast<uint16_t>(group[0] | group[1] << 8);
      const double d = std::fabs(static_cast<double>(kvc_f16_to_f32(bits)));
      for (size_t i = g * 32; i < g * 32 + 32; ++i) {
        const double steps = std::fabs(static_cast<double>(x[i])) / d;
        // q4_0 clamps values of the other sign than the group's extreme beyond 7.5 steps.
        const double bound = steps > 7.5 && format == KVC_DTYPE_Q4_0 ? d : d / 2;
        CHECK(std::fabs(static_cast<double>(x[i]) - y[i]) <= bound * (1 + 1e-6));
      }
    }
  }
}

TEST_CASE("formats: K and V formats are set apart, read back, and refused when unknown") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), mixed_params(KVC_DTYPE_F16, KVC_DTYPE_F32));
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  CHECK(p.k_dtype == -1);
  CHECK(p.v_dtype == -1);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache.get(), &p));
  CHECK(p.dtype == KVC_DTYPE_F16);
  CHECK(p.k_dtype == KVC_DTYPE_F16);
  CHECK(p.v_dtype == KVC_DTYPE_F32);

  // -1 follows dtype; the parameters read back create the same cache.
  kvc_cache_params same = mixed_params(-1, KVC_DTYPE_F32);
  kvt::CachePtr again = kvt::make_cache(ctx.get(), same);
  KVT_REQUIRE_OK(kvc_cache_get_params(again.get(), &p));
  CHECK(p.k_dtype == KVC_DTYPE_BF16);
  CHECK(p.v_dtype == KVC_DTYPE_F32);
  kvt::CachePtr copy = kvt::make_cache(ctx.get(), p);
  kvc_cache_params q;
  kvc_cache_params_init(&q);
  KVT_REQUIRE_OK(kvc_cache_get_params(copy.get(), &q));
  CHECK(q.k_dtype == KVC_DTYPE_BF16);
  CHECK(q.v_dtype == KVC_DTYPE_F32);

  // A caller built before k_dtype and v_dtype had a struct ending in padding where k_dtype now
  // lies: whatever the padding holds, its cache stores K and V as dtype.
  kvc_cache_params old = mixed_params(KVC_DTYPE_F32, 77);
  old.dtype = KVC_DTYPE_F16;
  old.struct_size = offsetof(kvc_cache_params, k_dtype) + 4;
  kvt::CachePtr from_old = kvt::make_cache(ctx.get(), old);
  KVT_REQUIRE_OK(kvc_cache_get_params(from_old.get(), &q));
  CHECK(q.k_dtype == KVC_DTYPE_F16);
  CHECK(q.v_dtype == KVC_DTYPE_F16);

  for (int bad : {-2, KVC_FORMAT_CODE_END, 1000}) {
    CAPTURE(bad);
    kvc_cache* out = nullptr;
    kvt::Status st{kvc_cache_create(ctx.get(), &(same = mixed_params(bad, KVC_DTYPE_F32)), &out)};
    CHECK(st.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(kvt::contains(st.message(), "k_dtype"));
    kvt::Status sv{kvc_cache_create(ctx.get(), &(same = mixed_params(KVC_DTYPE_F32, bad)), &out)};
    CHECK(sv.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(kvt::contains(sv.message(), "v_dtype"));
    CHECK(out == nullptr);
  }
}

TEST_CASE("formats: K and V rows of different formats are stored apart, each region aligned") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), mixed_params(KVC_DTYPE_F16, KVC_DTYPE_F32));
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  ref::Rng rng(5);
  const int32_t n = 7;
  const std::vector<float> k = rng.vec(33 * n), v = rng.vec(33 * n);
  append_tokens(cache.get(), k, v, n);
  // A block of 3 tokens: K 3 x 33 x 2 = 198 bytes, padded to 200 for V's f32 rows
  // (3 x 33 x 4 = 396), then 3 int32 positions: 608 bytes; 7 tokens take 3 blocks.
  const kvc_cache_stats s = kvt::get_stats(cache.get());
  CHECK(s.blocks_used == 3);
  CHECK(s.bytes_used == 3 * 608);

  std::vector<float> stored_k, stored_v;
  viewed_rows(cache.get(), stored_k, stored_v);
  CHECK(stored_k == rounded(k, KVC_DTYPE_F16));
  CHECK(stored_v == v);
  size_t count = 0;
  KVT_REQUIRE_OK(kvc_seq_view(cache.get(), 0, 0, 0, nullptr, 0, &count));
  std::vector<kvc_segment_view> views(count);
  KVT_REQUIRE_OK(kvc_seq_view(cache.get(), 0, 0, 0, views.data(), count, &count));
  for (const kvc_segment_view& view : views) {
    CHECK(reinterpret_cast<uintptr_t>(view.v) % alignof(float) == 0);
    CHECK(reinterpret_cast<uintptr_t>(view.pos) % alignof(int32_t) == 0);
  }
}

TEST_CASE("formats: a sequence of two formats exports and imports, converting only exactly") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr source = kvt::make_cache(ctx.get(), mixed_params(KVC_DTYPE_BF16, KVC_DTYPE_F16));
  KVT_REQUIRE_OK(kvc_seq_create(source.get(), 0));
  ref::Rng rng(8);
  const int32_t n = 5;
  const std::vector<float> k = rng.vec(33 * n), v = rng.vec(33 * n);
  append_tokens(source.get(), k, v, n);
  const std::vector<uint8_t> bytes = exported(source.get());
  CHECK(bytes[8] == 2);  // format version 2: the V format is in the header

  // Into a cache of the same formats, contiguous this time: the same image comes back.
  kvc_cache_params contiguous = mixed_params(KVC_DTYPE_BF16, KVC_DTYPE_F16);
  contiguous.layout = KVC_LAYOUT_CONTIGUOUS;
  kvt::CachePtr twin = kvt::make_cache(ctx.get(), contiguous);
  KVT_REQUIRE_OK(kvc_seq_import(twin.get(), 0, bytes.data(), bytes.size()));
  std::vector<uint8_t> again = exported(twin.get());
  again[32] = bytes[32];  // the layout it came from
  std::memcpy(again.data() + again.size() - 4, bytes.data() + bytes.size() - 4, 4);
  CHECK(again == bytes);

  // Into f32 K and V: both widen exactly.
  kvt::CachePtr wide = kvt::make_cache(ctx.get(), mixed_params(KVC_DTYPE_F32, KVC_DTYPE_F32));
  KVT_REQUIRE_OK(kvc_seq_import(wide.get(), 0, bytes.data(), bytes.size()));
  std::vector<float> stored_k, stored_v;
  viewed_rows(wide.get(), stored_k, stored_v);
  CHECK(stored_k == rounded(k, KVC_DTYPE_BF16));
  CHECK(stored_v == rounded(v, KVC_DTYPE_F16));

  // Into bf16 K and V: f16 V would lose bits in bf16, and nothing is created.
  kvt::CachePtr narrow =
      kvt::make_cache(ctx.get(), mixed_params(KVC_DTYPE_BF16, KVC_DTYPE_BF16));
  kvt::Status st{kvc_seq_import(narrow.get(), 0, bytes.data(), bytes.size())};
  CHECK(st.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(st.message(), "cannot store f16 data in a bf16 cache"));
  int32_t length = -1;
  CHECK(kvt::Status{kvc_seq_length(narrow.get(), 0, 0, 0, &length)}.code() == KVC_ERR_NOT_FOUND);
}

TEST_CASE("formats: a quantized sequence exports and imports bit for bit, widens exactly, and "
          "nothing quantizes on import") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params quantized = mixed_params(KVC_DTYPE_Q8_0, KVC_DTYPE_Q4_0);
  quantized.head_dim = 64;
  kvt::CachePtr source = kvt::make_cache(ctx.get(), quantized);
  KVT_REQUIRE_OK(kvc_seq_create(source.get(), 0));
  ref::Rng rng(9);
  const int32_t n = 7;
  const std::vector<float> k = rng.vec(64 * n), v = rng.vec(64 * n);
  append_tokens(source.get(), k, v, n);
  const std::vector<uint8_t> bytes = exported(source.get());

  // The viewed rows are the table's encoding of the appended ones.
  std::vector<float> stored_k, stored_v;
  viewed_rows(source.get(), stored_k, stored_v);
  auto through = [](const std::vector<float>& x, kvc_dtype format) {
    std::vector<unsigned char> row(kvc_format_row_bytes(format, x.size()));
    std::vector<float> back(x.size());
    REQUIRE(kvc_format_row_from_f32(format, x.data(), row.data(), x.size()));
    REQUIRE(kvc_format_row_to_f32(format, row.data(), back.data(), x.size()));
    return back;
  };
  CHECK(stored_k == through(k, KVC_DTYPE_Q8_0));
  CHECK(stored_v == through(v, KVC_DTYPE_Q4_0));

  quantized.layout = KVC_LAYOUT_CONTIGUOUS;
  kvt::CachePtr twin = kvt::make_cache(ctx.get(), quantized);
  KVT_REQUIRE_OK(kvc_seq_import(twin.get(), 0, bytes.data(), bytes.size()));
  std::vector<uint8_t> again = exported(twin.get());
  again[32] = bytes[32];  // the layout it came from
  std::memcpy(again.data() + again.size() - 4, bytes.data() + bytes.size() - 4, 4);
  CHECK(again == bytes);

  kvc_cache_params f32 = mixed_params(KVC_DTYPE_F32, KVC_DTYPE_F32);
  f32.head_dim = 64;
  kvt::CachePtr wide = kvt::make_cache(ctx.get(), f32);
  KVT_REQUIRE_OK(kvc_seq_import(wide.get(), 0, bytes.data(), bytes.size()));
  std::vector<float> wide_k, wide_v;
  viewed_rows(wide.get(), wide_k, wide_v);
  CHECK(wide_k == stored_k);
  CHECK(wide_v == stored_v);

  // The f32 export into a q8_0 cache, and the q4_0 V into f16: both refused, nothing created.
  const std::vector<uint8_t> f32_bytes = exported(wide.get());
  kvt::Status st{kvc_seq_import(twin.get(), 1, f32_bytes.data(), f32_bytes.size())};
  CHECK(st.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(st.message(), "quantizing to q8_0 would lose bits"));
  kvc_cache_params f16 = mixed_params(KVC_DTYPE_Q8_0, KVC_DTYPE_F16);
  f16.head_dim = 64;
  kvt::CachePtr half = kvt::make_cache(ctx.get(), f16);
  kvt::Status sv{kvc_seq_import(half.get(), 0, bytes.data(), bytes.size())};
  CHECK(sv.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(sv.message(), "q4_0's values"));
  int32_t length = -1;
  CHECK(kvt::Status{kvc_seq_length(half.get(), 0, 0, 0, &length)}.code() == KVC_ERR_NOT_FOUND);

  // Fewer bytes per token than f16, from the table.
  kvc_cache_params plain = mixed_params(KVC_DTYPE_F16, KVC_DTYPE_F16);
  plain.head_dim = 64;
  quantized.layout = plain.layout = KVC_LAYOUT_CONTIGUOUS;
  kvt::CachePtr q = kvt::make_cache(ctx.get(), quantized), h = kvt::make_cache(ctx.get(), plain);
  for (kvc_cache* c : {q.get(), h.get()}) {
    KVT_REQUIRE_OK(kvc_seq_create(c, 0));
    KVT_REQUIRE_OK(kvc_seq_reserve(c, 0, 96));
  }
  CHECK(kvt::get_stats(h.get()).bytes_used - kvt::get_stats(q.get()).bytes_used ==
        96 * (2 * kvc_format_row_bytes(KVC_DTYPE_F16, 64) -
              kvc_format_row_bytes(KVC_DTYPE_Q8_0, 64) - kvc_format_row_bytes(KVC_DTYPE_Q4_0, 64)));

  // head_dim not a multiple of the group is refused, naming the format.
  kvc_cache* raw = nullptr;
  quantized.head_dim = 40;
  kvt::Status sh{kvc_cache_create(ctx.get(), &quantized, &raw)};
  CHECK(sh.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(sh.message(), "q8_0"));
  CHECK(raw == nullptr);
}

TEST_CASE("formats: a quantized cache of the YAML key dtype") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache* raw = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(
      ctx.get(), "cache: { head_dim: 64, dtype: q4_0, k_dtype: q8_0 }", &raw));
  kvt::CachePtr cache(raw);
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache.get(), &p));
  CHECK(p.k_dtype == KVC_DTYPE_Q8_0);
  CHECK(p.v_dtype == KVC_DTYPE_Q4_0);
}

TEST_CASE("formats: a mixed-format cache of the YAML keys k_dtype and v_dtype") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache* cache = nullptr;
  KVT_REQUIRE_OK(kvc_cache_create_from_yaml(
      ctx.get(), "cache:\n  head_dim: 8\n  dtype: f16\n  v_dtype: f32\n", &cache));
  kvt::CachePtr owner(cache);
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  KVT_REQUIRE_OK(kvc_cache_get_params(cache, &p));
  CHECK(p.k_dtype == KVC_DTYPE_F16);
  CHECK(p.v_dtype == KVC_DTYPE_F32);
}

TEST_CASE("formats: compaction moves K and V rows of different formats with their tokens") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = mixed_params(KVC_DTYPE_F32, KVC_DTYPE_BF16);
  p.policy = "streaming";  // keeps 4 sinks and the newest tokens up to the budget
  p.budget = 7;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  ref::Rng rng(12);
  const int32_t n = 20;
  const std::vector<float> k = rng.vec(33 * n), v = rng.vec(33 * n);
  append_tokens(cache.get(), k, v, n);
  const int32_t seq = 0;
  KVT_REQUIRE_OK(kvc_compress(cache.get(), -1, 1, &seq));
  const std::vector<int32_t> kept = {0, 1, 2, 3, 17, 18, 19};
  std::vector<float> expected_k, expected_v;
  for (int32_t t : kept) {
    const auto row = [t](const std::vector<float>& x) {
      return std::vector<float>(x.begin() + 33 * t, x.begin() + 33 * (t + 1));
    };
    const std::vector<float> kr = row(k), vr = rounded(row(v), KVC_DTYPE_BF16);
    expected_k.insert(expected_k.end(), kr.begin(), kr.end());
    expected_v.insert(expected_v.end(), vr.begin(), vr.end());
  }
  std::vector<float> stored_k, stored_v;
  viewed_rows(cache.get(), stored_k, stored_v);
  CHECK(stored_k == expected_k);
  CHECK(stored_v == expected_v);
}
