// Sequence images (core/src/sequence_image.*): bit-exact round trips, the documented byte
// layout, exact storage conversions, and decode's refusal of truncated, bit-flipped and lying
// bytes.
#include <doctest/doctest.h>

#include <boost/crc.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"
#include "kvcache/kvcache_plugin.h"
#include "sequence_image.hpp"

// The largest single allocation while `g_tracking` is set: a decode of a lying header must
// not allocate what the header claims. Replacing operator new is the only way to see that.
namespace {
thread_local bool g_tracking = false;
thread_local size_t g_largest = 0;
}  // namespace

// Not inlined: GCC 12 otherwise pairs the malloc() or free() it sees inside with the operator
// it does not see into (-Wmismatched-new-delete), depending on what else the file inlines.
__attribute__((noinline)) void* operator new(std::size_t size) {
  if (g_tracking && size > g_largest) g_largest = size;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using kvc::HeadImage;
using kvc::SequenceImage;

constexpr uint32_t kAllStats = KVC_STAT_ATTN_SUM | KVC_STAT_ATTN_LAST | KVC_STAT_ATTN_WINDOW;
constexpr size_t kHeaderBytes = 56;  // docs/sequence_format.md, version 1
constexpr kvc_dtype kFormats[] = {KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

size_t largest_allocation_during(const std::function<void()>& f) {
  g_largest = 0;
  g_tracking = true;
  try {
    f();
  } catch (...) {
    g_tracking = false;
    throw;
  }
  g_tracking = false;
  return g_largest;
}

std::vector<uint8_t> encoded(const SequenceImage& image) {
  std::vector<uint8_t> bytes(kvc::encoded_size(image));
  kvc::encode(image, bytes.data(), bytes.size());
  return bytes;
}

// The error decode raises for `bytes` (fails the test when it raises none).
kvc::Error decode_error(const std::vector<uint8_t>& bytes) {
  try {
    kvc::decode(bytes.data(), bytes.size());
  } catch (const kvc::Error& e) {
    return e;
  }
  FAIL_CHECK("decode accepted " << bytes.size() << " bytes");
  return kvc::Error(KVC_OK, "");
}

// Recomputes the checksum so that a forged field gets past it.
void reseal(std::vector<uint8_t>& bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size() - 4);
  const uint32_t c = crc.checksum();
  for (size_t i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<uint8_t>(c >> (8 * i));
}

void put_u32(std::vector<uint8_t>& bytes, size_t offset, uint32_t x) {
  for (size_t i = 0; i < 4; ++i) bytes[offset + i] = static_cast<uint8_t>(x >> (8 * i));
}
void put_u64(std::vector<uint8_t>& bytes, size_t offset, uint64_t x) {
  for (size_t i = 0; i < 8; ++i) bytes[offset + i] = static_cast<uint8_t>(x >> (8 * i));
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

float random_float(std::mt19937& rng) {
  const uint32_t bits = static_cast<uint32_t>(rng());  // nans and infinities included
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

SequenceImage random_image(std::mt19937& rng, kvc_dtype dtype, uint32_t stats,
                           kvc_dtype v_dtype) {
  const auto pick = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  SequenceImage image;
  image.layers = pick(1, 3);
  image.kv_heads = pick(1, 3);
  image.q_heads = image.kv_heads * pick(1, 2);
  image.head_dim = pick(1, 8);
  image.k_dtype = dtype;
  image.v_dtype = v_dtype;
  image.layout = pick(0, 1) ? KVC_LAYOUT_CONTIGUOUS : KVC_LAYOUT_PAGED;
  image.stats = stats;
  const size_t d = static_cast<size_t>(image.head_dim);
  const size_t k_row = kvc_format_row_bytes(dtype, d), v_row = kvc_format_row_bytes(v_dtype, d);
  image.heads.resize(static_cast<size_t>(image.layers * image.kv_heads));
  for (HeadImage& head : image.heads) {
    const int n = pick(0, 6);
    int32_t pos = pick(0, 3);
    for (int i = 0; i < n; ++i, pos += pick(1, 4)) head.positions.push_back(pos);
    head.k = random_bytes(rng, n * k_row);
    head.v = random_bytes(rng, n * v_row);
    for (int s = 0; s < 3; ++s) {
      if ((stats & (1u << s)) == 0) continue;
      for (int i = 0; i < n; ++i) head.stats[s].push_back(random_float(rng));
    }
    head.seen = n + pick(0, 1) * pick(0, 1 << 20);
    head.effective_budget = pick(0, 1) ? -1 : pick(0, 100);
  }
  image.triggers.resize(static_cast<size_t>(image.layers));
  for (auto& t : image.triggers) t = {pick(0, 50), pick(0, 1) == 1};
  return image;
}

// Two layers of one KV head, two tokens each, f16, every statistic: 198 bytes.
SequenceImage small_image() {
  std::mt19937 rng(7);
  SequenceImage image;
  image.layers = 2;
  image.kv_heads = 1;
  image.q_heads = 2;
  image.head_dim = 2;
  image.k_dtype = image.v_dtype = KVC_DTYPE_F16;
  image.layout = KVC_LAYOUT_PAGED;
  image.stats = kAllStats;
  image.heads.resize(2);
  for (HeadImage& head : image.heads) {
    head.positions = {3, 9};
    head.k = random_bytes(rng, 8);
    head.v = random_bytes(rng, 8);
    for (auto& s : head.stats) s = {random_float(rng), random_float(rng)};
    head.seen = 12;
  }
  image.triggers = {{4, true}, {0, false}};
  return image;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

void check_same(const SequenceImage& a, const SequenceImage& b) {
  CHECK(a.layers == b.layers);
  CHECK(a.kv_heads == b.kv_heads);
  CHECK(a.q_heads == b.q_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.k_dtype == b.k_dtype);
  CHECK(a.v_dtype == b.v_dtype);
  CHECK(a.k_rotation == b.k_rotation);
  CHECK(a.layout == b.layout);
  CHECK(a.stats == b.stats);
  CHECK(a.offload_version == b.offload_version);
  CHECK(a.demoted.has_value() == b.demoted.has_value());
  if (a.demoted && b.demoted) CHECK(*a.demoted == *b.demoted);
  REQUIRE(a.heads.size() == b.heads.size());
  for (size_t h = 0; h < a.heads.size(); ++h) {
    CAPTURE(h);
    const HeadImage& x = a.heads[h];
    const HeadImage& y = b.heads[h];
    CHECK(x.positions == y.positions);
    CHECK(x.demoted == y.demoted);
    CHECK(x.k == y.k);
    CHECK(x.v == y.v);
    for (int s = 0; s < 3; ++s) CHECK(same_floats(x.stats[s], y.stats[s]));
    CHECK(x.seen == y.seen);
    CHECK(x.effective_budget == y.effective_budget);
  }
  REQUIRE(a.triggers.size() == b.triggers.size());
  for (size_t l = 0; l < a.triggers.size(); ++l) {
    CHECK(a.triggers[l].decode_steps == b.triggers[l].decode_steps);
    CHECK(a.triggers[l].prefill_pending == b.triggers[l].prefill_pending);
  }
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("sequence image: random images round-trip bit for bit, at the size their shape gives") {
  std::mt19937 rng(2024);
  for (kvc_dtype dtype : kFormats) {
    for (kvc_dtype v_dtype : kFormats) {
      for (uint32_t stats : {0u, uint32_t{KVC_STAT_ATTN_SUM},
                             uint32_t{KVC_STAT_ATTN_LAST | KVC_STAT_ATTN_WINDOW}, kAllStats}) {
        for (int round = 0; round < 25; ++round) {
          CAPTURE(dtype);
          CAPTURE(v_dtype);
          CAPTURE(stats);
          CAPTURE(round);
          const SequenceImage image = random_image(rng, dtype, stats, v_dtype);
          const std::vector<uint8_t> bytes = encoded(image);
          const SequenceImage back = kvc::decode(bytes.data(), bytes.size());
          check_same(image, back);
          CHECK(encoded(back) == bytes);
          // The size from the shape and token counts alone (kvc_seq_export_size's) is the same.
          std::vector<size_t> head_tokens;
          for (const HeadImage& head : image.heads) head_tokens.push_back(head.positions.size());
          CHECK(kvc::encoded_size(image.layers, image.head_dim, dtype, v_dtype, stats,
                                  head_tokens) == bytes.size());
          // One format for K and V is written as version 1, which older builds read.
          CHECK(bytes[8] == (dtype == v_dtype ? 1 : 2));
        }
      }
    }
  }
}

TEST_CASE("sequence image: rows decoded in place are the encoded rows, and convert as copied ones") {
  std::mt19937 rng(31);
  for (kvc_dtype dtype : kFormats) {
    for (int round = 0; round < 20; ++round) {
      CAPTURE(dtype);
      CAPTURE(round);
      const SequenceImage image = random_image(rng, dtype, KVC_STAT_ATTN_SUM, dtype);
      const std::vector<uint8_t> bytes = encoded(image);
      SequenceImage copied = kvc::decode(bytes.data(), bytes.size());
      SequenceImage in_place =
          kvc::decode(bytes.data(), bytes.size(), kvc::DecodedRows::in_place);
      const uint8_t* end = bytes.data() + bytes.size();
      for (size_t h = 0; h < image.heads.size(); ++h) {
        CAPTURE(h);
        const HeadImage& head = in_place.heads[h];
        const size_t n = image.heads[h].k.size();
        CHECK(head.k.empty());
        CHECK(head.v.empty());
        REQUIRE(head.k_in_place != nullptr);
        REQUIRE(head.v_in_place != nullptr);
        CHECK(head.k_rows() >= bytes.data());
        CHECK(head.v_rows() + n <= end);
        if (n > 0) {  // an empty vector's data() may be null, which memcmp may not take
          CHECK(std::memcmp(head.k_rows(), image.heads[h].k.data(), n) == 0);
          CHECK(std::memcmp(head.v_rows(), image.heads[h].v.data(), n) == 0);
        }
        CHECK(head.positions == image.heads[h].positions);
        CHECK(same_floats(head.stats[0], image.heads[h].stats[0]));
      }
      kvc::convert_storage(copied, KVC_DTYPE_F32, KVC_DTYPE_F32);
      kvc::convert_storage(in_place, KVC_DTYPE_F32, KVC_DTYPE_F32);
      if (dtype == KVC_DTYPE_F32) {
        CHECK(in_place.heads[0].k_in_place != nullptr);  // nothing to convert: still in place
        continue;
      }
      for (const HeadImage& head : in_place.heads) {
        CHECK(head.k_in_place == nullptr);
        CHECK(head.v_in_place == nullptr);
      }
      check_same(in_place, copied);
    }
  }
}

TEST_CASE("sequence image: encoded_size is what encode writes, and a smaller buffer is refused") {
  std::mt19937 rng(5);
  const SequenceImage image = random_image(rng, KVC_DTYPE_BF16, kAllStats, KVC_DTYPE_BF16);
  const size_t size = kvc::encoded_size(image);
  std::vector<uint8_t> buffer(size + 64, 0xa5);
  kvc::encode(image, buffer.data(), buffer.size());
  for (size_t i = size; i < buffer.size(); ++i) CHECK(buffer[i] == 0xa5);
  check_same(kvc::decode(buffer.data(), size), image);

  std::vector<uint8_t> small(size - 1, 0xa5);
  try {
    kvc::encode(image, small.data(), small.size());
    FAIL_CHECK("encode wrote into a buffer one byte short");
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "too small"));
  }
  CHECK(small == std::vector<uint8_t>(size - 1, 0xa5));
}

namespace {

// The rows of a whole image, written where a streamed encode asks for them.
class ImageRows final : public kvc::RowWriter {
 public:
  explicit ImageRows(const SequenceImage& image) : image_(image) {}
  void write(size_t head, uint8_t* k, uint8_t* v) const override {
    const HeadImage& h = image_.heads[head];
    if (h.k.empty()) return;
    std::memcpy(k, h.k.data(), h.k.size());
    std::memcpy(v, h.v.data(), h.v.size());
  }

 private:
  const SequenceImage& image_;
};

}  // namespace

TEST_CASE("sequence image: an encode whose rows a RowWriter writes gives the same bytes") {
  std::mt19937 rng(17);
  for (kvc_dtype dtype : kFormats) {
    for (uint32_t stats : {0u, kAllStats}) {
      CAPTURE(dtype);
      CAPTURE(stats);
      const SequenceImage image =
          random_image(rng, dtype, stats, dtype == KVC_DTYPE_F16 ? KVC_DTYPE_F32 : dtype);
      SequenceImage without_rows = image;
      for (HeadImage& head : without_rows.heads) {
        head.k.clear();
        head.v.clear();
      }
      const std::vector<uint8_t> whole = encoded(image);
      std::vector<uint8_t> streamed(whole.size() + 8, 0xa5);
      CHECK(kvc::encode(without_rows, ImageRows(image), streamed.data(), streamed.size()) ==
            whole.size());
      CHECK(std::vector<uint8_t>(streamed.begin(), streamed.begin() + whole.size()) == whole);
      // Rows a streamed encode does not write are refused as in any other image.
      CHECK_THROWS_AS(kvc::encode(image, ImageRows(image), streamed.data(), streamed.size()),
                      kvc::Error);
    }
  }
}

TEST_CASE("sequence image: the bytes are little-endian, laid out as documented") {
  SequenceImage image;
  image.layers = 1;
  image.kv_heads = 1;
  image.q_heads = 2;
  image.head_dim = 2;
  image.k_dtype = image.v_dtype = KVC_DTYPE_F16;
  image.layout = KVC_LAYOUT_CONTIGUOUS;
  image.stats = KVC_STAT_ATTN_LAST;
  HeadImage head;
  head.positions = {0x01020304};
  const uint16_t k[2] = {0x3c00, 0xabcd}, v[2] = {0x1234, 0x8001};
  head.k.resize(4);
  head.v.resize(4);
  std::memcpy(head.k.data(), k, 4);  // host order, as a cache stores them
  std::memcpy(head.v.data(), v, 4);
  head.stats[1] = {1.0f};  // 0x3f800000
  head.seen = 0x0000000500000006;
  head.effective_budget = -1;
  image.heads = {head};
  image.triggers = {{0x0a0b0c0d, true}};

  std::vector<uint8_t> expected = {
      0x89, 'K',  'V',  'C',  '\r', '\n', 0x1a, '\n',  // magic
      1,    0,    0,    0,                             // format version
      1,    0,    0,    0,    1,    0,    0,    0,     // layers, kv_heads
      2,    0,    0,    0,    2,    0,    0,    0,     // q_heads, head_dim
      1,    0,    0,    0,    1,    0,    0,    0,     // dtype f16, layout contiguous
      2,    0,    0,    0,                             // statistics: attn_last
      32,   0,    0,    0,    0,    0,    0,    0,     // head section bytes
      5,    0,    0,    0,    0,    0,    0,    0,     // trigger section bytes
      1,    0,    0,    0,    0xff, 0xff, 0xff, 0xff,  // n, effective budget
      6,    0,    0,    0,    5,    0,    0,    0,     // seen
      0x04, 0x03, 0x02, 0x01,                          // positions
      0x00, 0x3c, 0xcd, 0xab,                          // keys
      0x34, 0x12, 0x01, 0x80,                          // values
      0x00, 0x00, 0x80, 0x3f,                          // attn_last
      0x0d, 0x0c, 0x0b, 0x0a, 1,                       // layer 0: decode steps, prefill pending
  };
  boost::crc_32_type crc;
  crc.process_bytes(expected.data(), expected.size());
  for (int i = 0; i < 4; ++i) expected.push_back(static_cast<uint8_t>(crc.checksum() >> (8 * i)));
  CHECK(encoded(image) == expected);
}

TEST_CASE("sequence image: two formats make version 2, the V dtype after the sections") {
  SequenceImage image;
  image.layers = image.kv_heads = image.q_heads = 1;
  image.head_dim = 2;
  image.k_dtype = KVC_DTYPE_BF16;
  image.v_dtype = KVC_DTYPE_F32;
  image.layout = KVC_LAYOUT_PAGED;
  image.stats = 0;
  HeadImage head;
  head.positions = {7};
  const uint16_t k[2] = {0x3f80, 0xc000};  // bf16 1, -2
  const float v[2] = {0.5f, -4.0f};         // 0x3f000000, 0xc0800000
  head.k.resize(4);
  head.v.resize(8);
  std::memcpy(head.k.data(), k, 4);
  std::memcpy(head.v.data(), v, 8);
  head.seen = 1;
  head.effective_budget = -1;
  image.heads = {head};
  image.triggers = {{0, false}};

  std::vector<uint8_t> expected = {
      0x89, 'K',  'V',  'C',  '\r', '\n', 0x1a, '\n',  // magic
      2,    0,    0,    0,                             // format version
      1,    0,    0,    0,    1,    0,    0,    0,     // layers, kv_heads
      1,    0,    0,    0,    2,    0,    0,    0,     // q_heads, head_dim
      2,    0,    0,    0,    0,    0,    0,    0,     // dtype (K) bf16, layout paged
      0,    0,    0,    0,                             // statistics: none
      32,   0,    0,    0,    0,    0,    0,    0,     // head section bytes
      5,    0,    0,    0,    0,    0,    0,    0,     // trigger section bytes
      0,    0,    0,    0,                             // V dtype f32
      1,    0,    0,    0,    0xff, 0xff, 0xff, 0xff,  // n, effective budget
      1,    0,    0,    0,    0,    0,    0,    0,     // seen
      7,    0,    0,    0,                             // positions
      0x80, 0x3f, 0x00, 0xc0,                          // keys
      0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0xc0,  // values
      0,    0,    0,    0,    0,                       // layer 0: decode steps, prefill pending
  };
  boost::crc_32_type crc;
  crc.process_bytes(expected.data(), expected.size());
  for (int i = 0; i < 4; ++i) expected.push_back(static_cast<uint8_t>(crc.checksum() >> (8 * i)));
  CHECK(encoded(image) == expected);
  check_same(kvc::decode(expected.data(), expected.size()), image);
  // Cut inside the V dtype: the header is short.
  std::vector<uint8_t> short_header(expected.begin(), expected.begin() + 58);
  CHECK(contains(decode_error(short_header).what(), "truncated"));
}

TEST_CASE("sequence image: an offload version makes version 3, after the V dtype") {
  SequenceImage image;
  image.layers = image.kv_heads = image.q_heads = 1;
  image.head_dim = 1;
  image.k_dtype = image.v_dtype = KVC_DTYPE_F32;
  image.offload_version = 0x0102030405060708;
  HeadImage head;
  head.positions = {3};
  const float k = 1.0f, v = -2.0f;  // 0x3f800000, 0xc0000000
  head.k.resize(4);
  head.v.resize(4);
  std::memcpy(head.k.data(), &k, 4);
  std::memcpy(head.v.data(), &v, 4);
  head.seen = 1;
  head.effective_budget = -1;
  image.heads = {head};
  image.triggers = {{0, false}};

  std::vector<uint8_t> expected = {
      0x89, 'K',  'V',  'C',  '\r', '\n', 0x1a, '\n',  // magic
      3,    0,    0,    0,                             // format version
      1,    0,    0,    0,    1,    0,    0,    0,     // layers, kv_heads
      1,    0,    0,    0,    1,    0,    0,    0,     // q_heads, head_dim
      0,    0,    0,    0,    0,    0,    0,    0,     // dtype (K) f32, layout paged
      0,    0,    0,    0,                             // statistics: none
      28,   0,    0,    0,    0,    0,    0,    0,     // head section bytes
      5,    0,    0,    0,    0,    0,    0,    0,     // trigger section bytes
      0,    0,    0,    0,                             // V dtype f32
      8,    7,    6,    5,    4,    3,    2,    1,     // offload version
      1,    0,    0,    0,    0xff, 0xff, 0xff, 0xff,  // n, effective budget
      1,    0,    0,    0,    0,    0,    0,    0,     // seen
      3,    0,    0,    0,                             // positions
      0x00, 0x00, 0x80, 0x3f,                          // keys
      0x00, 0x00, 0x00, 0xc0,                          // values
      0,    0,    0,    0,    0,                       // layer 0: decode steps, prefill pending
  };
  boost::crc_32_type crc;
  crc.process_bytes(expected.data(), expected.size());
  for (int i = 0; i < 4; ++i) expected.push_back(static_cast<uint8_t>(crc.checksum() >> (8 * i)));
  CHECK(encoded(image) == expected);
  CHECK(kvc::encoded_size(image) == expected.size());
  CHECK(kvc::encoded_size(1, 1, KVC_DTYPE_F32, KVC_DTYPE_F32, 0, {1}, image.offload_version) ==
        expected.size());
  const SequenceImage decoded = kvc::decode(expected.data(), expected.size());
  check_same(decoded, image);
  CHECK(decoded.offload_version == image.offload_version);
  // Without one the same image is version 1, as older builds wrote it, and decodes with none.
  image.offload_version = 0;
  const std::vector<uint8_t> plain = encoded(image);
  CHECK(plain[8] == 1);
  CHECK(plain.size() == expected.size() - 12);
  CHECK(kvc::decode(plain.data(), plain.size()).offload_version == 0);
  // Cut inside the offload version: the header is short.
  std::vector<uint8_t> short_header(expected.begin(), expected.begin() + 64);
  CHECK(contains(decode_error(short_header).what(), "truncated"));
}

TEST_CASE("sequence image: encode refuses an image decode would refuse") {
  const auto error = [](const SequenceImage& image) {
    try {
      kvc::encoded_size(image);
    } catch (const kvc::Error& e) {
      CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
      return std::string(e.what());
    }
    FAIL_CHECK("no error");
    return std::string();
  };
  SequenceImage image = small_image();
  image.heads[1].k.pop_back();
  CHECK(contains(error(image), "layer 1 head 0 keys: 7 bytes, 2 tokens of 2 x f16 need 8"));
  image = small_image();
  image.heads[0].positions = {9, 3};
  CHECK(contains(error(image), "layer 0 head 0: position 3 of token 1 follows 9"));
  image = small_image();
  image.heads[0].stats[2].clear();
  CHECK(contains(error(image), "layer 0 head 0 attn_window statistics: 0 values, 2 expected"));
  image = small_image();
  image.heads.pop_back();
  CHECK(contains(error(image), "1 heads for 2 layers x 1 KV heads"));
  image = small_image();
  image.heads[0].seen = 1;
  CHECK(contains(error(image), "holds 2 tokens but only 1 were ever appended"));
  image = small_image();
  image.stats = KVC_STAT_KEYS;
  CHECK(contains(error(image), "statistics mask 8 has bits other than"));
}

TEST_CASE("sequence image: f16 and bf16 convert to f32 exactly") {
  struct Case {
    kvc_dtype dtype;
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
  };
  for (const Case& c : {Case{KVC_DTYPE_F16, kvc_f16_to_f32, kvc_f32_to_f16},
                        Case{KVC_DTYPE_BF16, kvc_bf16_to_f32, kvc_f32_to_bf16}}) {
    CAPTURE(c.dtype);
    // One head holding every 16-bit pattern in K, and in V in the reverse order.
    SequenceImage image;
    image.layers = image.kv_heads = image.q_heads = 1;
    image.head_dim = 256;
    image.k_dtype = image.v_dtype = c.dtype;
    image.layout = KVC_LAYOUT_PAGED;
    image.stats = KVC_STAT_ATTN_SUM;
    HeadImage head;
    std::vector<uint16_t> k(65536), v(65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      k[i] = static_cast<uint16_t>(i);
      v[i] = static_cast<uint16_t>(65535 - i);
    }
    head.k.resize(2 * 65536);
    head.v.resize(2 * 65536);
    std::memcpy(head.k.data(), k.data(), head.k.size());
    std::memcpy(head.v.data(), v.data(), head.v.size());
    for (int32_t t = 0; t < 256; ++t) {
      head.positions.push_back(2 * t);
      head.stats[0].push_back(0.25f * static_cast<float>(t));
    }
    head.seen = 300;
    head.effective_budget = 256;
    image.heads = {head};
    image.triggers = {{3, false}};

    SequenceImage wide = image;
    kvc::convert_storage(wide, KVC_DTYPE_F32, KVC_DTYPE_F32);
    CHECK(wide.k_dtype == KVC_DTYPE_F32);
    CHECK(wide.v_dtype == KVC_DTYPE_F32);
    REQUIRE(wide.heads[0].k.size() == 4 * 65536);
    REQUIRE(wide.heads[0].v.size() == 4 * 65536);
    int mismatches = 0, lossy = 0;
    for (size_t i = 0; i < 65536; ++i) {
      float fk, fv;
      std::memcpy(&fk, wide.heads[0].k.data() + 4 * i, 4);
      std::memcpy(&fv, wide.heads[0].v.data() + 4 * i, 4);
      mismatches += float_bits(fk) != float_bits(c.to_f32(k[i]));
      mismatches += float_bits(fv) != float_bits(c.to_f32(v[i]));
      if (!std::isnan(fk)) lossy += c.from_f32(fk) != k[i];  // converts back: nothing lost
    }
    CHECK(mismatches == 0);
    CHECK(lossy == 0);
    CHECK(wide.heads[0].positions == image.heads[0].positions);
    CHECK(same_floats(wide.heads[0].stats[0], image.heads[0].stats[0]));
    CHECK(wide.heads[0].seen == 300);
    CHECK(wide.heads[0].effective_budget == 256);
    CHECK(wide.triggers[0].decode_steps == 3);

    SequenceImage same = image;
    kvc::convert_storage(same, c.dtype, c.dtype);
    check_same(same, image);

    // K and V convert apart: only V is widened here.
    SequenceImage v_wide = image;
    kvc::convert_storage(v_wide, c.dtype, KVC_DTYPE_F32);
    CHECK(v_wide.k_dtype == c.dtype);
    CHECK(v_wide.v_dtype == KVC_DTYPE_F32);
    CHECK(v_wide.heads[0].k == image.heads[0].k);
    CHECK(v_wide.heads[0].v == wide.heads[0].v);
  }
}

TEST_CASE("sequence image: lossy storage conversions are refused, naming why") {
  std::mt19937 rng(11);
  const struct {
    kvc_dtype from, to;
    const char* why;
  } cases[] = {{KVC_DTYPE_F32, KVC_DTYPE_F16, "rounding f32 to f16 would lose bits"},
               {KVC_DTYPE_F32, KVC_DTYPE_BF16, "rounding f32 to bf16 would lose bits"},
               {KVC_DTYPE_F16, KVC_DTYPE_BF16, "10 mantissa bits, bf16 only 7"},
               {KVC_DTYPE_BF16, KVC_DTYPE_F16, "8-bit exponent, f16 only 5"}};
  for (const auto& c : cases) {
    // The lossy part is V's; K converts exactly, and is left unconverted all the same.
    const SequenceImage image = random_image(rng, KVC_DTYPE_F16, 0, c.from);
    SequenceImage target = image;
    try {
      kvc::convert_storage(target, KVC_DTYPE_F32, c.to);
      FAIL_CHECK(kvc_format_name(c.from) << " -> " << kvc_format_name(c.to) << " converted");
    } catch (const kvc::Error& e) {
      CHECK(e.code() == KVC_ERR_UNSUPPORTED);
      const std::string expected = std::string("cannot store ") + kvc_format_name(c.from) +
                                   " data in a " + kvc_format_name(c.to) + " cache without loss";
      CHECK(contains(e.what(), expected));
      CHECK(contains(e.what(), c.why));
    }
    check_same(target, image);
  }
}

TEST_CASE("sequence image: every truncation is a clear error") {
  const std::vector<uint8_t> bytes = encoded(small_image());
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    // An exactly sized copy, so that a read past the end shows under the sanitizers.
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    const kvc::Error e = decode_error(prefix);
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "sequence image: truncated"));
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  CHECK(contains(decode_error(longer).what(), "1 bytes after the checksum"));
}

TEST_CASE("sequence image: rotated keys make version 4, the rotation after the offload version") {
  SequenceImage image;
  image.layers = image.kv_heads = image.q_heads = 1;
  image.head_dim = 1;
  image.k_dtype = image.v_dtype = KVC_DTYPE_F32;
  image.k_rotation = KVC_ROTATION_HADAMARD;
  HeadImage head;
  head.positions = {3};
  const float k = 1.0f, v = -2.0f;  // 0x3f800000, 0xc0000000
  head.k.resize(4);
  head.v.resize(4);
  std::memcpy(head.k.data(), &k, 4);
  std::memcpy(head.v.data(), &v, 4);
  head.seen = 1;
  head.effective_budget = -1;
  image.heads = {head};
  image.triggers = {{0, false}};

  std::vector<uint8_t> expected = {
      0x89, 'K',  'V',  'C',  '\r', '\n', 0x1a, '\n',  // magic
      4,    0,    0,    0,                             // format version
      1,    0,    0,    0,    1,    0,    0,    0,     // layers, kv_heads
      1,    0,    0,    0,    1,    0,    0,    0,     // q_heads, head_dim
      0,    0,    0,    0,    0,    0,    0,    0,     // dtype (K) f32, layout paged
      0,    0,    0,    0,                             // statistics: none
      28,   0,    0,    0,    0,    0,    0,    0,     // head section bytes
      5,    0,    0,    0,    0,    0,    0,    0,     // trigger section bytes
      0,    0,    0,    0,                             // V dtype f32
      0,    0,    0,    0,    0,    0,    0,    0,     // offload version: none
      1,    0,    0,    0,                             // K rotation: hadamard
      1,    0,    0,    0,    0xff, 0xff, 0xff, 0xff,  // n, effective budget
      1,    0,    0,    0,    0,    0,    0,    0,     // seen
      3,    0,    0,    0,                             // positions
      0x00, 0x00, 0x80, 0x3f,                          // keys
      0x00, 0x00, 0x00, 0xc0,                          // values
      0,    0,    0,    0,    0,                       // layer 0: decode steps, prefill pending
  };
  const auto with_checksum = [](std::vector<uint8_t> bytes) {
    boost::crc_32_type crc;
    crc.process_bytes(bytes.data(), bytes.size());
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(crc.checksum() >> (8 * i)));
    return bytes;
  };
  const std::vector<uint8_t> bytes = with_checksum(expected);
  CHECK(encoded(image) == bytes);
  CHECK(kvc::encoded_size(image) == bytes.size());
  CHECK(kvc::encoded_size(1, 1, KVC_DTYPE_F32, KVC_DTYPE_F32, 0, {1}, 0, KVC_ROTATION_HADAMARD) ==
        bytes.size());
  CHECK(kvc::decode(bytes.data(), bytes.size()).k_rotation == KVC_ROTATION_HADAMARD);
  // A rotation this kvcache does not know, behind a valid checksum.
  expected[68] = 2;
  const std::vector<uint8_t> forged = with_checksum(expected);
  const kvc::Error unknown = decode_error(forged);
  CHECK(unknown.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(contains(unknown.what(), "unknown K rotation 2"));
}

TEST_CASE("sequence image: every single-bit flip is a clear error") {
  const std::vector<uint8_t> bytes = encoded(small_image());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      CAPTURE(i);
      CAPTURE(bit);
      std::vector<uint8_t> flipped = bytes;
      flipped[i] = static_cast<uint8_t>(flipped[i] ^ (1u << bit));
      const kvc::Error e = decode_error(flipped);
      const std::string message = e.what();
      if (i < 8) {
        CHECK(contains(message, "sequence image: bad magic"));
      } else if (i == 8 && (bit == 1 || bit == 2)) {  // version 3 or 5: header bytes more
                                                       // than were written
        INFO(message);
        CHECK((contains(message, "sequence image: truncated") ||
               contains(message, "sequence image: checksum mismatch")));
      } else if (i < 12) {
        CHECK(contains(message, "sequence image: unknown format version"));
      } else if (i >= 40 && i < kHeaderBytes) {  // a section size: the total no longer matches
        CHECK((contains(message, "sequence image: truncated") ||
               contains(message, "bytes after the checksum")));
      } else {
        CHECK(contains(message, "sequence image: checksum mismatch"));
      }
    }
  }
}

TEST_CASE("sequence image: a newer format version is unsupported, naming both versions") {
  std::vector<uint8_t> bytes = encoded(small_image());
  put_u32(bytes, 8, 7);
  const kvc::Error newer = decode_error(bytes);
  CHECK(newer.code() == KVC_ERR_UNSUPPORTED);
  CHECK(contains(newer.what(), "unknown format version 7 (this kvcache reads 1 to 5)"));
  put_u32(bytes, 8, 0);
  CHECK(decode_error(bytes).code() == KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("sequence image: forged fields behind a valid checksum are refused") {
  const std::vector<uint8_t> good = encoded(small_image());
  REQUIRE(good.size() == 198);
  // Offsets of docs/sequence_format.md; the first head starts after the header.
  const size_t head0 = kHeaderBytes, positions0 = head0 + 16;
  const size_t triggers = good.size() - 4 - 10;
  const struct {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> forge;
    const char* message;
  } cases[] = {
      {"decreasing positions", [&](auto& b) { put_u32(b, positions0 + 4, 3); },
       "layer 0 head 0: position 3 of token 1 follows 3 (positions must be strictly increasing)"},
      {"negative position", [&](auto& b) { put_u32(b, positions0, 0xffffffffu); },
       "layer 0 head 0: position -1 of token 0 is negative"},
      {"more tokens than seen", [&](auto& b) { put_u64(b, head0 + 8, 1); },
       "layer 0 head 0: holds 2 tokens but only 1 were ever appended"},
      {"negative token count", [&](auto& b) { put_u32(b, head0, 0xfffffffeu); },
       "layer 0 head 0: token count -2 is negative"},
      {"budget below -1", [&](auto& b) { put_u32(b, head0 + 4, 0xfffffffeu); },
       "layer 0 head 0: effective budget -2 is below -1"},
      {"dtype", [](auto& b) { put_u32(b, 28, 7); }, "unknown dtype 7"},
      {"layout", [](auto& b) { put_u32(b, 32, 2); }, "unknown layout 2"},
      {"statistics mask", [](auto& b) { put_u32(b, 36, 15); }, "statistics mask 15 has bits"},
      {"zero layers", [](auto& b) { put_u32(b, 12, 0); }, "layers is 0, must be positive"},
      {"q_heads", [](auto& b) {
         put_u32(b, 16, 2);
         put_u32(b, 20, 3);
       }, "q_heads 3 is not a multiple of kv_heads 2"},
      {"section sizes", [](auto& b) {  // four bytes moved from the heads to the triggers
         put_u64(b, 40, 124);
         put_u64(b, 48, 14);
       }, "a trigger section of 14 bytes for 2 layers (5 bytes each)"},
      {"one layer", [](auto& b) {  // the second layer's head and trigger left as heads
         put_u32(b, 12, 1);
         put_u64(b, 40, 133);
         put_u64(b, 48, 5);
       }, "the head section has 69 bytes after the last head"},
      {"decode steps", [&](auto& b) { put_u32(b, triggers, 0x80000000u); },
       "layer 0 triggers: decode steps -2147483648 is negative"},
      {"prefill pending", [&](auto& b) { b[triggers + 9] = 2; },
       "layer 1 triggers: prefill pending is 2, must be 0 or 1"},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    std::vector<uint8_t> bytes = good;
    c.forge(bytes);
    reseal(bytes);
    const kvc::Error e = decode_error(bytes);
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), c.message));
  }
}

TEST_CASE("sequence image: a header lying about sizes fails without allocating what it claims") {
  const std::vector<uint8_t> good = encoded(small_image());
  const struct {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> forge;
    const char* message;
  } cases[] = {
      {"2^31 - 1 tokens", [](auto& b) {
         put_u32(b, kHeaderBytes, 0x7fffffffu);
         put_u64(b, kHeaderBytes + 8, 0x7fffffffu);  // seen, so that n <= seen holds
       }, "truncated in layer 0 head 0 positions: "},
      {"2^30 heads", [](auto& b) {
         put_u32(b, 12, 1u << 20);  // layers
         put_u32(b, 16, 1u << 10);  // kv_heads
         put_u32(b, 20, 1u << 10);  // q_heads
       }, "1048576 layers x 1024 KV heads do not fit in a head section of"},
      {"head_dim 2^30", [](auto& b) { put_u32(b, 24, 1u << 30); },
       "truncated in layer 0 head 0 keys: "},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    std::vector<uint8_t> bytes = good;
    c.forge(bytes);
    reseal(bytes);
    std::string message;
    const size_t largest = largest_allocation_during([&] { message = decode_error(bytes).what(); });
    CHECK(contains(message, c.message));
    CHECK(largest < 4096);
  }
}

// ------------------------------------------------------------------ demoted tiers (version 5)

namespace {

using kvc::DemotedFormats;

size_t row_of(kvc_dtype dtype, int32_t head_dim) {
  return kvc_format_row_bytes(dtype, static_cast<size_t>(head_dim));
}

// A random image whose heads hold demoted tiers of the `demoted` formats: each head's
// positions are dealt at random to its tiers, which therefore interleave; head 0 demotes one
// token at least.
SequenceImage random_mixed_image(std::mt19937& rng, kvc_dtype k_dtype, kvc_dtype v_dtype,
                                 DemotedFormats demoted, uint32_t stats) {
  const auto pick = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  SequenceImage image;
  image.layers = pick(1, 2);
  image.kv_heads = pick(1, 2);
  image.q_heads = image.kv_heads * pick(1, 2);
  image.head_dim = 32 * pick(1, 2);  // the group of q8_0 and q4_0
  image.k_dtype = k_dtype;
  image.v_dtype = v_dtype;
  image.stats = stats;
  image.offload_version = pick(0, 1) ? 0 : 77;
  image.demoted = demoted;
  image.heads.resize(static_cast<size_t>(image.layers * image.kv_heads));
  for (size_t h = 0; h < image.heads.size(); ++h) {
    HeadImage& head = image.heads[h];
    std::vector<int32_t> low, own;
    const int n = pick(h == 0 ? 1 : 0, 9);
    int32_t pos = pick(0, 3);
    for (int i = 0; i < n; ++i, pos += pick(1, 3)) {
      (i == 0 && h == 0 ? low : pick(0, 1) ? low : own).push_back(pos);
    }
    head.positions = low;
    head.positions.insert(head.positions.end(), own.begin(), own.end());
    head.demoted = static_cast<int32_t>(low.size());
    head.k = random_bytes(rng, low.size() * row_of(demoted.k_dtype, image.head_dim) +
                                   own.size() * row_of(k_dtype, image.head_dim));
    head.v = random_bytes(rng, low.size() * row_of(demoted.v_dtype, image.head_dim) +
                                   own.size() * row_of(v_dtype, image.head_dim));
    for (int s = 0; s < 3; ++s) {
      if ((stats & (1u << s)) == 0) continue;
      for (int i = 0; i < n; ++i) head.stats[s].push_back(random_float(rng));
    }
    head.seen = n + pick(0, 40);
    head.effective_budget = pick(0, 1) ? -1 : pick(0, 100);
  }
  image.triggers.resize(static_cast<size_t>(image.layers));
  for (auto& t : image.triggers) t = {pick(0, 50), pick(0, 1) == 1};
  return image;
}

// One head of 32 values: positions 5 and 6 demoted (q8_0 K, q4_0 V), then 0, 1 and 9 in f16,
// attn_sum tracked.
SequenceImage small_mixed_image() {
  std::mt19937 rng(3);
  SequenceImage image;
  image.layers = image.kv_heads = image.q_heads = 1;
  image.head_dim = 32;
  image.k_dtype = image.v_dtype = KVC_DTYPE_F16;
  image.stats = KVC_STAT_ATTN_SUM;
  image.demoted = DemotedFormats{KVC_DTYPE_Q8_0, KVC_DTYPE_Q4_0};
  HeadImage head;
  head.positions = {5, 6, 0, 1, 9};
  head.demoted = 2;
  head.k = random_bytes(rng, 2 * 34 + 3 * 64);
  head.v = random_bytes(rng, 2 * 18 + 3 * 64);
  for (int i = 0; i < 5; ++i) head.stats[0].push_back(static_cast<float>(i));
  head.seen = 10;
  head.effective_budget = 4;
  image.heads = {head};
  image.triggers = {{0, false}};
  return image;
}

// Where small_mixed_image()'s encoding holds its head's demoted count and positions.
constexpr size_t kMixedDemotedAt = 80 + 16;
constexpr size_t kMixedPositionsAt = kMixedDemotedAt + 4;

// small_mixed_image()'s bytes with the positions `positions`, resealed.
std::vector<uint8_t> with_positions(std::vector<int32_t> positions) {
  std::vector<uint8_t> bytes = encoded(small_mixed_image());
  for (size_t i = 0; i < positions.size(); ++i) {
    put_u32(bytes, kMixedPositionsAt + 4 * i, static_cast<uint32_t>(positions[i]));
  }
  reseal(bytes);
  return bytes;
}

std::string encode_error(const SequenceImage& image) {
  try {
    (void)kvc::encoded_size(image);
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  FAIL_CHECK("encode accepted the image");
  return "";
}

}  // namespace

TEST_CASE("sequence image: demoted tiers round-trip bit for bit in version 5, at the size their shape gives") {
  std::mt19937 rng(55);
  const DemotedFormats demoted_formats[] = {{KVC_DTYPE_Q4_0, KVC_DTYPE_Q4_0},
                                            {KVC_DTYPE_Q8_0, KVC_DTYPE_F16},
                                            {KVC_DTYPE_BF16, KVC_DTYPE_Q8_0}};
  for (kvc_dtype dtype : kFormats) {
    for (const DemotedFormats& demoted : demoted_formats) {
      for (uint32_t stats : {0u, kAllStats}) {
        for (int round = 0; round < 8; ++round) {
          CAPTURE(dtype);
          CAPTURE(demoted.k_dtype);
          CAPTURE(demoted.v_dtype);
          CAPTURE(stats);
          CAPTURE(round);
          const kvc_dtype v_dtype = round % 2 ? KVC_DTYPE_F32 : dtype;
          const SequenceImage image = random_mixed_image(rng, dtype, v_dtype, demoted, stats);
          const std::vector<uint8_t> bytes = encoded(image);
          CHECK(bytes[8] == 5);
          const SequenceImage back = kvc::decode(bytes.data(), bytes.size());
          check_same(image, back);
          CHECK(encoded(back) == bytes);
          CHECK(kvc::encode(image) == bytes);
          // The size from the shape and each head's token and demoted counts alone.
          std::vector<size_t> head_tokens, head_demoted;
          for (const HeadImage& head : image.heads) {
            head_tokens.push_back(head.positions.size());
            head_demoted.push_back(static_cast<size_t>(head.demoted));
          }
          CHECK(kvc::encoded_size(image.layers, image.head_dim, dtype, v_dtype, stats,
                                  head_tokens, image.offload_version, KVC_ROTATION_NONE, demoted,
                                  head_demoted) == bytes.size());
          // Rows decoded in place are the encoded ones, both tiers together.
          const SequenceImage in_place =
              kvc::decode(bytes.data(), bytes.size(), kvc::DecodedRows::in_place);
          for (size_t h = 0; h < image.heads.size(); ++h) {
            const HeadImage& head = image.heads[h];
            CHECK(in_place.heads[h].demoted == head.demoted);
            if (head.k.empty()) continue;
            CHECK(std::memcmp(in_place.heads[h].k_rows(), head.k.data(), head.k.size()) == 0);
            CHECK(std::memcmp(in_place.heads[h].v_rows(), head.v.data(), head.v.size()) == 0);
          }
          // Streamed rows give the same bytes.
          SequenceImage rowless = image;
          for (HeadImage& head : rowless.heads) {
            head.k.clear();
            head.v.clear();
          }
          std::vector<uint8_t> streamed(bytes.size());
          CHECK(kvc::encode(rowless, ImageRows(image), streamed.data(), streamed.size()) ==
                bytes.size());
          CHECK(streamed == bytes);
        }
      }
    }
  }
}

TEST_CASE("sequence image: version 5 holds the demoted formats after the rotation, a demoted count per head") {
  const SequenceImage image = small_mixed_image();
  const std::vector<uint8_t> bytes = encoded(image);
  const HeadImage& head = image.heads[0];
  const size_t record = 20 + 5 * 4 + head.k.size() + head.v.size() + 5 * 4;
  REQUIRE(bytes.size() == 80 + record + 5 + 4);
  const auto u32_at = [&](size_t at) {
    uint32_t x = 0;
    for (size_t i = 0; i < 4; ++i) x |= static_cast<uint32_t>(bytes[at + i]) << (8 * i);
    return x;
  };
  CHECK(u32_at(8) == 5);
  CHECK(u32_at(28) == KVC_DTYPE_F16);
  CHECK(u32_at(40) == record);
  CHECK(u32_at(56) == KVC_DTYPE_F16);  // V
  CHECK(u32_at(68) == KVC_ROTATION_NONE);
  CHECK(u32_at(72) == KVC_DTYPE_Q8_0);  // demoted K
  CHECK(u32_at(76) == KVC_DTYPE_Q4_0);  // demoted V
  CHECK(u32_at(80) == 5);               // n
  CHECK(u32_at(84) == 4);               // effective budget
  CHECK(u32_at(88) == 10);              // seen (low half)
  CHECK(u32_at(kMixedDemotedAt) == 2);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(u32_at(kMixedPositionsAt + 4 * i) == static_cast<uint32_t>(head.positions[i]));
  }
  // Keys: the two q8_0 rows, then the three f16 rows, as stored (little-endian on this host).
  const size_t keys = kMixedPositionsAt + 20;
  if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) {
    CHECK(std::memcmp(bytes.data() + keys, head.k.data(), head.k.size()) == 0);
    CHECK(std::memcmp(bytes.data() + keys + head.k.size(), head.v.data(), head.v.size()) == 0);
  }
  CHECK(float_bits(3.0f) == u32_at(keys + head.k.size() + head.v.size() + 12));  // attn_sum[3]
  // Without demoted tokens the same image is written in an older version.
  SequenceImage plain = image;
  plain.demoted.reset();
  plain.heads[0].demoted = 0;
  plain.heads[0].positions = {0, 1, 5, 6, 9};
  plain.heads[0].k.resize(5 * 64);
  plain.heads[0].v.resize(5 * 64);
  CHECK(encoded(plain)[8] == 1);
}

TEST_CASE("sequence image: decode refuses a corrupted demoted count, unknown demoted formats, formats without demoted tokens") {
  const std::vector<uint8_t> good = encoded(small_mixed_image());
  CHECK(kvc::decode(good.data(), good.size()).heads[0].demoted == 2);
  for (int32_t d : {6, -1}) {
    CAPTURE(d);
    std::vector<uint8_t> bytes = good;
    put_u32(bytes, kMixedDemotedAt, static_cast<uint32_t>(d));
    reseal(bytes);
    const kvc::Error e = decode_error(bytes);
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "layer 0 head 0: demoted token count " + std::to_string(d) +
                                 " is not within its 5 tokens"));
  }
  // A demoted count that moves the rows' boundary leaves the record's sizes wrong.
  {
    std::vector<uint8_t> bytes = good;
    put_u32(bytes, kMixedDemotedAt, 3);
    reseal(bytes);
    CHECK(decode_error(bytes).code() == KVC_ERR_INVALID_ARGUMENT);
  }
  for (size_t at : {size_t{72}, size_t{76}}) {
    CAPTURE(at);
    std::vector<uint8_t> bytes = good;
    put_u32(bytes, at, 99);
    reseal(bytes);
    const kvc::Error e = decode_error(bytes);
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), "unknown demoted dtype 99"));
  }
  // Demoted formats of another row size are caught by the sizes; of the same size (f16 rows
  // for f16) by the check that some head holds demoted tokens.
  SequenceImage same_rows = small_mixed_image();
  same_rows.demoted = DemotedFormats{KVC_DTYPE_F16, KVC_DTYPE_F16};
  same_rows.heads[0].positions = {0, 1, 5, 6, 9};
  same_rows.heads[0].k.resize(5 * 64);
  same_rows.heads[0].v.resize(5 * 64);
  std::vector<uint8_t> bytes = encoded(same_rows);
  CHECK(kvc::decode(bytes.data(), bytes.size()).heads[0].demoted == 2);
  put_u32(bytes, kMixedDemotedAt, 0);
  reseal(bytes);
  const kvc::Error none = decode_error(bytes);
  CHECK(none.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(contains(none.what(), "the header names demoted formats (f16 K, f16 V) but no head holds demoted tokens"));
}

TEST_CASE("sequence image: encode refuses demoted tokens without formats, formats without them, rows of the wrong size") {
  SequenceImage missing = small_mixed_image();
  missing.demoted.reset();
  CHECK(contains(encode_error(missing), "layer 0 head 0: holds 2 demoted tokens but the image names no demoted formats"));
  SequenceImage unused = small_mixed_image();
  unused.heads[0].demoted = 0;
  unused.heads[0].positions = {0, 1, 5, 6, 9};
  unused.heads[0].k.resize(5 * 64);
  unused.heads[0].v.resize(5 * 64);
  CHECK(contains(encode_error(unused), "names demoted formats but no head holds demoted tokens"));
  SequenceImage short_rows = small_mixed_image();
  short_rows.heads[0].k.resize(5 * 64);  // as if every row were f16
  CHECK(contains(encode_error(short_rows),
                 "layer 0 head 0 keys: 320 bytes, 2 tokens of 32 x q8_0 (demoted) and 3 tokens of "
                 "32 x f16 need 260"));
}

TEST_CASE("sequence image: positions increase within each tier, and the tiers interleave") {
  // 5 6 | 0 1 9: interleaved across the tiers, increasing within each.
  const std::vector<uint8_t> good = with_positions({5, 6, 0, 1, 9});
  CHECK(kvc::decode(good.data(), good.size()).heads[0].positions ==
        std::vector<int32_t>{5, 6, 0, 1, 9});
  CHECK(kvc::decode(with_positions({0, 1, 2, 3, 4}).data(), good.size()).heads[0].demoted == 2);
  struct Case {
    std::vector<int32_t> positions;
    const char* message;
  };
  for (const Case& c :
       {Case{{6, 5, 0, 1, 9}, "position 5 of token 1 follows 6 in the demoted tier (positions must "
                              "be strictly increasing within each tier)"},
        Case{{5, 6, 1, 0, 9}, "position 0 of token 3 follows 1 in the tier of its own formats"},
        Case{{5, 5, 0, 1, 9}, "position 5 of token 1 follows 5 in the demoted tier"},
        Case{{5, 6, 0, 5, 9}, "position 5 is both in the demoted tier (token 0) and in the other "
                              "(token 3)"}}) {
    CAPTURE(c.message);
    const std::vector<uint8_t> bytes = with_positions(c.positions);
    const kvc::Error e = decode_error(bytes);
    CHECK(e.code() == KVC_ERR_INVALID_ARGUMENT);
    CHECK(contains(e.what(), c.message));
    // encode refuses it too.
    SequenceImage image = small_mixed_image();
    image.heads[0].positions = c.positions;
    CHECK(contains(encode_error(image), c.message));
  }
}

TEST_CASE("sequence image: a storage conversion widens the rows of the image's formats, not a demoted tier's") {
  const SequenceImage image = small_mixed_image();
  SequenceImage wide = image;
  kvc::convert_storage(wide, KVC_DTYPE_F32, KVC_DTYPE_F16);
  CHECK(wide.k_dtype == KVC_DTYPE_F32);
  CHECK(wide.v_dtype == KVC_DTYPE_F16);
  REQUIRE(wide.demoted.has_value());
  CHECK(*wide.demoted == *image.demoted);
  const HeadImage& from = image.heads[0];
  const HeadImage& to = wide.heads[0];
  REQUIRE(to.k.size() == 2 * 34 + 3 * 128);
  CHECK(std::memcmp(to.k.data(), from.k.data(), 2 * 34) == 0);
  for (size_t i = 0; i < 3 * 32; ++i) {
    uint16_t half;
    std::memcpy(&half, from.k.data() + 2 * 34 + 2 * i, 2);
    float f;
    std::memcpy(&f, to.k.data() + 2 * 34 + 4 * i, 4);
    const float expected = kvc_f16_to_f32(half);
    CHECK((std::isnan(expected) ? std::isnan(f) : float_bits(f) == float_bits(expected)));
  }
  CHECK(to.v == from.v);
  const std::vector<uint8_t> bytes = encoded(wide);
  check_same(kvc::decode(bytes.data(), bytes.size()), wide);
}
