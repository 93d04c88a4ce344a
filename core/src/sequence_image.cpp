#include "sequence_image.hpp"

#include <isa-l/crc.h>

#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "kvcache/kvcache_rotation.h"

namespace kvc {
namespace {

// The layout is docs/sequence_format.md's table; every multi-byte value is little-endian.
// PNG's trick: a high-bit byte, CR LF, ^Z and LF reveal 7-bit and text-mode transfers.
constexpr uint8_t kMagic[8] = {0x89, 'K', 'V', 'C', '\r', '\n', 0x1a, '\n'};
constexpr size_t kHeaderBytes = 56;     // magic, version, shape, dtype, layout, stats, sections
constexpr size_t kVFormatBytes = 4;     // version 2: the V format after the sections
constexpr size_t kOffloadVersionBytes = 8;  // version 3: the offload version after that
constexpr size_t kRotationBytes = 4;        // version 4: the rotation of K after that
constexpr size_t kDemotedFormatsBytes = 8;  // version 5: the demoted K and V formats after that
constexpr size_t kHeadFixedBytes = 16;  // n, effective budget, seen
constexpr size_t kDemotedCountBytes = 4;  // version 5: the demoted tokens after those
constexpr size_t kTriggerBytes = 5;     // decode steps, prefill pending
constexpr size_t kChecksumBytes = 4;

// The on-disk order of the statistics, which is also HeadImage::stats's.
struct StatField {
  uint32_t flag;
  const char* name;
};
constexpr StatField kStats[3] = {{KVC_STAT_ATTN_SUM, "attn_sum"},
                                 {KVC_STAT_ATTN_LAST, "attn_last"},
                                 {KVC_STAT_ATTN_WINDOW, "attn_window"}};
constexpr uint32_t kAllStats = KVC_STAT_ATTN_SUM | KVC_STAT_ATTN_LAST | KVC_STAT_ATTN_WINDOW;

[[noreturn]] void fail(kvc_status_code code, const std::string& message) {
  throw Error(code, "sequence image: " + message);
}
[[noreturn]] void fail(const std::string& message) { fail(KVC_ERR_INVALID_ARGUMENT, message); }

std::string head_name(size_t index, int32_t kv_heads) {
  return "layer " + std::to_string(index / static_cast<size_t>(kv_heads)) + " head " +
         std::to_string(index % static_cast<size_t>(kv_heads));
}

// ------------------------------------------------------------------ byte order

template <class U>
void store_le(uint8_t* p, U x) {
  for (size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<uint8_t>(x >> (8 * i));
}

template <class U>
U load_le(const uint8_t* p) {
  U x = 0;
  for (size_t i = 0; i < sizeof(U); ++i) x = static_cast<U>(x | static_cast<U>(p[i]) << (8 * i));
  return x;
}

// Copies `count` host-order elements of U between memory and little-endian bytes.
template <class U>
void host_to_le(const uint8_t* host, uint8_t* le, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    U x;
    std::memcpy(&x, host + i * sizeof(U), sizeof(U));
    store_le(le + i * sizeof(U), x);
  }
}

template <class U>
void le_to_host(const uint8_t* le, uint8_t* host, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const U x = load_le<U>(le + i * sizeof(U));
    std::memcpy(host + i * sizeof(U), &x, sizeof(U));
  }
}

// On a little-endian host the bytes are the elements: the arrays are copied whole.
constexpr bool kHostIsLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// Elements of 2 or 4 bytes (storage dtypes, positions, statistics).
void host_to_le(const void* host, uint8_t* le, size_t count, size_t width) {
  const auto* h = static_cast<const uint8_t*>(host);
  if (count == 0) return;
  if (kHostIsLittleEndian) std::memcpy(le, h, count * width);
  else if (width == 2) host_to_le<uint16_t>(h, le, count);
  else host_to_le<uint32_t>(h, le, count);
}

void le_to_host(const uint8_t* le, void* host, size_t count, size_t width) {
  auto* h = static_cast<uint8_t*>(host);
  if (count == 0) return;
  if (kHostIsLittleEndian) std::memcpy(h, le, count * width);
  else if (width == 2) le_to_host<uint16_t>(le, h, count);
  else le_to_host<uint32_t>(le, h, count);
}

// Host-order elements of 2 or 4 bytes made little-endian where they are.
void host_to_le_in_place(uint8_t* bytes, size_t count, size_t width) {
  if (kHostIsLittleEndian || count == 0) return;
  if (width == 2) host_to_le<uint16_t>(bytes, bytes, count);
  else host_to_le<uint32_t>(bytes, bytes, count);
}

// CRC-32 (ISO-HDLC, as zlib and gzip compute it), by ISA-L, which folds with carry-less
// multiplies where the CPU has them: several times faster than zlib's sliced tables or
// boost::crc_32_type (docs/stores_results.md).
uint32_t checksum(const uint8_t* bytes, size_t n) { return crc32_gzip_refl(0, bytes, n); }

class Writer {
 public:
  explicit Writer(uint8_t* out) : p_(out) {}
  uint8_t* position() const { return p_; }
  void bytes(const uint8_t* data, size_t n) {
    std::memcpy(p_, data, n);
    p_ += n;
  }
  template <class U>
  void le(U x) {
    store_le(p_, x);
    p_ += sizeof(U);
  }
  void elements(const void* host, size_t count, size_t width) {
    host_to_le(host, p_, count, width);
    p_ += count * width;
  }
  // The next n bytes, for the caller to fill.
  uint8_t* skip(size_t n) {
    uint8_t* at = p_;
    p_ += n;
    return at;
  }

 private:
  uint8_t* p_;
};

// Reads within [p, p + n); every read checks what is left first. `where` names the part being
// read in messages ("layer 3 head 1").
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), left_(n) {}
  size_t left() const { return left_; }
  void at(std::string where) { where_ = std::move(where); }

  // The next count * width bytes; the counts of the format (products of two int32 at most,
  // widths of 4 bytes at most) cannot overflow the product.
  const uint8_t* take(uint64_t count, uint64_t width, const char* part) {
    const uint64_t n = count * width;
    if (n > left_) {
      fail("truncated in " + where_ + (where_.empty() ? "" : " ") + part + ": " +
           std::to_string(left_) + " bytes left, " + std::to_string(n) + " needed");
    }
    const uint8_t* p = p_;
    p_ += n;
    left_ -= static_cast<size_t>(n);
    return p;
  }
  template <class U>
  U le(const char* part) {
    return load_le<U>(take(1, sizeof(U), part));
  }
  int32_t i32(const char* part) { return static_cast<int32_t>(le<uint32_t>(part)); }
  int64_t i64(const char* part) { return static_cast<int64_t>(le<uint64_t>(part)); }
  // count elements of `width` bytes into `out`, allocated only once they are known to be there.
  template <class T>
  void array(std::vector<T>& out, uint64_t count, uint64_t width, const char* part) {
    const uint8_t* p = take(count, width, part);
    out.resize(static_cast<size_t>(count * width / sizeof(T)));
    le_to_host(p, out.data(), static_cast<size_t>(count), static_cast<size_t>(width));
  }

 private:
  const uint8_t* p_;
  size_t left_;
  std::string where_;
};

// ------------------------------------------------------------------ checks shared by both ways

// `which`: "" for the image's own formats, "demoted " for its demoted tiers'.
void check_formats(uint32_t k_dtype, uint32_t v_dtype, int32_t head_dim, const char* which) {
  for (uint32_t dtype : {k_dtype, v_dtype}) {
    if (dtype >= KVC_FORMAT_CODE_END || !kvc_format_is_valid(static_cast<int>(dtype))) {
      fail(std::string("unknown ") + which + "dtype " + std::to_string(dtype));
    }
    if (kvc_format_row_bytes(static_cast<int>(dtype), static_cast<size_t>(head_dim)) == 0) {
      fail("head_dim " + std::to_string(head_dim) + " is not a multiple of " + which +
           kvc_format_name(static_cast<int>(dtype)) + "'s group size");
    }
  }
}

void check_header(int32_t layers, int32_t kv_heads, int32_t q_heads, int32_t head_dim,
                  uint32_t k_dtype, uint32_t v_dtype, uint32_t layout, uint32_t stats) {
  const std::pair<const char*, int32_t> positive[] = {
      {"layers", layers}, {"kv_heads", kv_heads}, {"q_heads", q_heads}, {"head_dim", head_dim}};
  for (const auto& [name, value] : positive) {
    if (value < 1) fail(std::string(name) + " is " + std::to_string(value) + ", must be positive");
  }
  if (q_heads % kv_heads != 0) {
    fail("q_heads " + std::to_string(q_heads) + " is not a multiple of kv_heads " +
         std::to_string(kv_heads));
  }
  check_formats(k_dtype, v_dtype, head_dim, "");
  if (layout != KVC_LAYOUT_PAGED && layout != KVC_LAYOUT_CONTIGUOUS) {
    fail("unknown layout " + std::to_string(layout));
  }
  if ((stats & ~kAllStats) != 0) {
    fail("statistics mask " + std::to_string(stats) +
         " has bits other than attn_sum (1), attn_last (2), attn_window (4)");
  }
}

void check_rotation(uint32_t k_rotation) {
  if (k_rotation > KVC_ROTATION_HADAMARD || !kvc_rotation_is_valid(static_cast<int>(k_rotation))) {
    fail("unknown K rotation " + std::to_string(k_rotation));
  }
}

void check_counters(int32_t n, int32_t demoted, int64_t seen, int32_t budget,
                    const std::string& where) {
  if (n < 0) fail(where + ": token count " + std::to_string(n) + " is negative");
  if (demoted < 0 || demoted > n) {
    fail(where + ": demoted token count " + std::to_string(demoted) + " is not within its " +
         std::to_string(n) + " tokens");
  }
  if (seen < n) {
    fail(where + ": holds " + std::to_string(n) + " tokens but only " + std::to_string(seen) +
         " were ever appended");
  }
  if (budget < -1) fail(where + ": effective budget " + std::to_string(budget) + " is below -1");
}

// Each tier (the first `demoted` tokens, then the rest) strictly increasing; across tiers
// positions interleave, but none is in both.
void check_positions(const std::vector<int32_t>& positions, size_t demoted,
                     const std::string& where) {
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0) {
      fail(where + ": position " + std::to_string(positions[i]) + " of token " +
           std::to_string(i) + " is negative");
    }
    if (i > 0 && i != demoted && positions[i] <= positions[i - 1]) {
      fail(where + ": position " + std::to_string(positions[i]) + " of token " +
           std::to_string(i) + " follows " + std::to_string(positions[i - 1]) +
           (demoted > 0 ? (i < demoted ? " in the demoted tier" : " in the tier of its own formats")
                        : std::string()) +
           " (positions must be strictly increasing" + (demoted > 0 ? " within each tier)" : ")"));
    }
  }
  // Both tiers are sorted: one merge finds a position held twice.
  for (size_t a = 0, b = demoted; a < demoted && b < positions.size();) {
    if (positions[a] == positions[b]) {
      fail(where + ": position " + std::to_string(positions[a]) +
           " is both in the demoted tier (token " + std::to_string(a) +
           ") and in the other (token " + std::to_string(b) + ")");
    }
    if (positions[a] < positions[b]) ++a;
    else ++b;
  }
}

void check_trigger(int32_t decode_steps, size_t layer) {
  if (decode_steps < 0) {
    fail("layer " + std::to_string(layer) + " triggers: decode steps " +
         std::to_string(decode_steps) + " is negative");
  }
}

uint64_t row_bytes(int32_t head_dim, kvc_dtype dtype) {
  return kvc_format_row_bytes(dtype, static_cast<size_t>(head_dim));
}

// The width of the host-order units of a row, which the image stores little-endian.
size_t unit_bytes(kvc_dtype dtype) {
  return kvc_format_group_size(dtype) == 1 ? kvc_format_group_bytes(dtype) : 1;
}

// The oldest version that holds the image: 5 with demoted tiers, else 4 with rotated keys, else
// 3 with an offload version, else 1 when K and V share a format (as every image before version
// 2 did), else 2.
uint32_t version_for(kvc_dtype k_dtype, kvc_dtype v_dtype, uint64_t offload_version,
                     kvc_rotation k_rotation, bool demotes) {
  if (demotes) return 5;
  if (k_rotation != KVC_ROTATION_NONE) return 4;
  if (offload_version != 0) return 3;
  return k_dtype == v_dtype ? 1 : 2;
}

size_t header_bytes(uint32_t version) {
  return kHeaderBytes + (version >= 2 ? kVFormatBytes : 0) +
         (version >= 3 ? kOffloadVersionBytes : 0) + (version >= 4 ? kRotationBytes : 0) +
         (version >= 5 ? kDemotedFormatsBytes : 0);
}

size_t head_fixed_bytes(uint32_t version) {
  return kHeadFixedBytes + (version >= 5 ? kDemotedCountBytes : 0);
}

int stat_count(uint32_t stats) {
  int count = 0;
  for (const StatField& s : kStats) count += (stats & s.flag) != 0;
  return count;
}

struct Sections {
  uint64_t heads;
  uint64_t triggers;
  uint64_t header = kHeaderBytes;
};

// The bytes of each token of a head: its position, K and V rows and statistics.
uint64_t token_bytes(int32_t head_dim, kvc_dtype k_dtype, kvc_dtype v_dtype, uint32_t stats) {
  return 4 + row_bytes(head_dim, k_dtype) + row_bytes(head_dim, v_dtype) +
         4 * static_cast<uint64_t>(stat_count(stats));
}

// The bytes of a head record: its fixed fields, then per token (of its own formats or the
// demoted ones).
struct RecordBytes {
  uint64_t fixed;
  uint64_t per_token;
  uint64_t per_demoted_token;
  uint64_t of(size_t tokens, size_t demoted) const {
    return fixed + (tokens - demoted) * per_token + demoted * per_demoted_token;
  }
};

RecordBytes record_bytes(int32_t head_dim, kvc_dtype k_dtype, kvc_dtype v_dtype, uint32_t stats,
                         const std::optional<DemotedFormats>& demoted, uint32_t version) {
  const uint64_t own = token_bytes(head_dim, k_dtype, v_dtype, stats);
  const uint64_t low =
      demoted ? token_bytes(head_dim, demoted->k_dtype, demoted->v_dtype, stats) : own;
  return RecordBytes{head_fixed_bytes(version), own, low};
}

bool any_demoted(const SequenceImage& image) {
  for (const HeadImage& head : image.heads) {
    if (head.demoted > 0) return true;
  }
  return false;
}

uint32_t version_of(const SequenceImage& image) {
  return version_for(image.k_dtype, image.v_dtype, image.offload_version, image.k_rotation,
                     image.demoted.has_value());
}

// A head's K or V rows as runs of one format each: its demoted tier's, then the others'.
struct RowRun {
  uint64_t tokens;
  kvc_dtype dtype;
  const char* part;
};
std::array<RowRun, 2> row_runs(const SequenceImage& image, uint64_t n, uint64_t demoted,
                               bool values) {
  const kvc_dtype own = values ? image.v_dtype : image.k_dtype;
  const kvc_dtype low =
      !image.demoted ? own : values ? image.demoted->v_dtype : image.demoted->k_dtype;
  return {RowRun{demoted, low, values ? "demoted values" : "demoted keys"},
          RowRun{n - demoted, own, values ? "values" : "keys"}};
}

uint64_t rows_bytes(const std::array<RowRun, 2>& runs, int32_t head_dim) {
  return runs[0].tokens * row_bytes(head_dim, runs[0].dtype) +
         runs[1].tokens * row_bytes(head_dim, runs[1].dtype);
}

uint64_t image_bytes(const Sections& s) {
  return s.header + s.heads + s.triggers + kChecksumBytes;
}

// Checks an image about to be encoded as decode() checks one read, and sizes its sections; the
// sizes of K and V are not checked when a RowWriter writes them (rows_streamed).
Sections check_image(const SequenceImage& image, bool rows_streamed) {
  check_header(image.layers, image.kv_heads, image.q_heads, image.head_dim,
               static_cast<uint32_t>(image.k_dtype), static_cast<uint32_t>(image.v_dtype),
               static_cast<uint32_t>(image.layout), image.stats);
  check_rotation(static_cast<uint32_t>(image.k_rotation));
  if (image.demoted) {
    check_formats(static_cast<uint32_t>(image.demoted->k_dtype),
                  static_cast<uint32_t>(image.demoted->v_dtype), image.head_dim, "demoted ");
  }
  const uint64_t head_count = static_cast<uint64_t>(image.layers) * image.kv_heads;
  if (image.heads.size() != head_count) {
    fail(std::to_string(image.heads.size()) + " heads for " + std::to_string(image.layers) +
         " layers x " + std::to_string(image.kv_heads) + " KV heads");
  }
  if (image.triggers.size() != static_cast<size_t>(image.layers)) {
    fail(std::to_string(image.triggers.size()) + " trigger states for " +
         std::to_string(image.layers) + " layers");
  }
  if (image.demoted && !any_demoted(image)) {
    fail("the image names demoted formats but no head holds demoted tokens");
  }
  const uint32_t version = version_of(image);
  const RecordBytes record = record_bytes(image.head_dim, image.k_dtype, image.v_dtype,
                                          image.stats, image.demoted, version);
  Sections sections{0, kTriggerBytes * image.triggers.size(), header_bytes(version)};
  for (size_t h = 0; h < image.heads.size(); ++h) {
    const HeadImage& head = image.heads[h];
    const std::string where = head_name(h, image.kv_heads);
    const size_t n = head.positions.size();
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail(where + ": " + std::to_string(n) + " tokens, more than an int32 counts");
    }
    check_counters(static_cast<int32_t>(n), head.demoted, head.seen, head.effective_budget, where);
    if (head.demoted > 0 && !image.demoted) {
      fail(where + ": holds " + std::to_string(head.demoted) +
           " demoted tokens but the image names no demoted formats");
    }
    const size_t demoted = static_cast<size_t>(head.demoted);
    check_positions(head.positions, demoted, where);
    struct Rows {
      const char* part;
      const std::vector<uint8_t>* data;
      std::array<RowRun, 2> runs;
    };
    for (const Rows& r : {Rows{"keys", &head.k, row_runs(image, n, demoted, false)},
                          Rows{"values", &head.v, row_runs(image, n, demoted, true)}}) {
      const uint64_t expected_rows = rows_streamed ? 0 : rows_bytes(r.runs, image.head_dim);
      if (r.data->size() != expected_rows) {
        const auto tokens_of = [&](const RowRun& run) {
          return std::to_string(run.tokens) + " tokens of " + std::to_string(image.head_dim) +
                 " x " + kvc_format_name(run.dtype);
        };
        const std::string tokens =
            demoted > 0 ? tokens_of(r.runs[0]) + " (demoted) and " + tokens_of(r.runs[1])
                        : tokens_of(r.runs[1]);
        fail(where + " " + r.part + ": " + std::to_string(r.data->size()) + " bytes, " + tokens +
             " need " + std::to_string(expected_rows) +
             (rows_streamed ? " (a RowWriter writes them)" : ""));
      }
    }
    for (int s = 0; s < 3; ++s) {
      const size_t expected = (image.stats & kStats[s].flag) != 0 ? n : 0;
      if (head.stats[s].size() != expected) {
        fail(where + " " + kStats[s].name + " statistics: " +
             std::to_string(head.stats[s].size()) + " values, " + std::to_string(expected) +
             " expected");
      }
    }
    sections.heads += record.of(n, demoted);
  }
  for (size_t layer = 0; layer < image.triggers.size(); ++layer) {
    check_trigger(image.triggers[layer].decode_steps, layer);
  }
  return sections;
}

// ------------------------------------------------------------------ decoding, part by part

struct Header {
  int32_t layers, kv_heads, q_heads, head_dim;
  uint32_t k_dtype, v_dtype, layout, stats;
  uint64_t offload_version;
  uint32_t k_rotation;
  uint32_t version;
  bool demotes;  // version 5: demoted formats follow
  uint32_t demoted_k_dtype, demoted_v_dtype;
  Sections sections;
};

Header read_header(Reader& r) {
  if (std::memcmp(r.take(1, sizeof kMagic, "magic"), kMagic, sizeof kMagic) != 0) {
    fail("bad magic: not a kvcache sequence image, or damaged by a text-mode transfer");
  }
  const uint32_t version = r.le<uint32_t>("format version");
  if (version < 1 || version > kSequenceFormatVersion) {
    fail(version > kSequenceFormatVersion ? KVC_ERR_UNSUPPORTED : KVC_ERR_INVALID_ARGUMENT,
         "unknown format version " + std::to_string(version) + " (this kvcache reads 1 to " +
             std::to_string(kSequenceFormatVersion) + ")");
  }
  const size_t fields = header_bytes(version) - sizeof kMagic - 4;
  Reader f(r.take(1, fields, "header"), fields);
  Header h;
  h.layers = f.i32("layers");
  h.kv_heads = f.i32("kv_heads");
  h.q_heads = f.i32("q_heads");
  h.head_dim = f.i32("head_dim");
  h.k_dtype = f.le<uint32_t>("dtype");
  h.layout = f.le<uint32_t>("layout");
  h.stats = f.le<uint32_t>("statistics mask");
  h.sections.heads = f.le<uint64_t>("head section size");
  h.sections.triggers = f.le<uint64_t>("trigger section size");
  h.sections.header = header_bytes(version);
  h.v_dtype = version >= 2 ? f.le<uint32_t>("V dtype") : h.k_dtype;
  h.offload_version = version >= 3 ? f.le<uint64_t>("offload version") : 0;
  h.k_rotation = version >= 4 ? f.le<uint32_t>("K rotation") : uint32_t{KVC_ROTATION_NONE};
  h.version = version;
  h.demotes = version >= 5;
  h.demoted_k_dtype = h.demotes ? f.le<uint32_t>("demoted K dtype") : h.k_dtype;
  h.demoted_v_dtype = h.demotes ? f.le<uint32_t>("demoted V dtype") : h.v_dtype;
  return h;
}

// The size the header declares against the n bytes given, then the checksum.
void check_envelope(const Sections& s, const uint8_t* bytes, size_t n) {
  const uint64_t body = n - s.header;
  if (s.heads > body || s.triggers > body - s.heads ||
      kChecksumBytes > body - s.heads - s.triggers) {
    fail("truncated: the header declares " + std::to_string(s.header) + " + " +
         std::to_string(s.heads) + " (heads) + " + std::to_string(s.triggers) +
         " (triggers) + " + std::to_string(kChecksumBytes) + " (checksum) bytes, " +
         std::to_string(n) + " given");
  }
  if (const uint64_t extra = body - s.heads - s.triggers - kChecksumBytes; extra != 0) {
    fail(std::to_string(extra) + " bytes after the checksum");
  }
  const uint32_t stored = load_le<uint32_t>(bytes + n - kChecksumBytes);
  const uint32_t computed = checksum(bytes, n - kChecksumBytes);
  if (stored != computed) {
    fail("checksum mismatch (stored " + std::to_string(stored) + ", computed " +
         std::to_string(computed) + "): the image is corrupted");
  }
}

// Rows of one format appended to `out` (host order), as units of unit_bytes(): their count
// and width are the format's, within the bounds Reader::take() needs. Returns where they lie
// in the bytes read.
const uint8_t* read_rows(Reader& r, const RowRun& run, int32_t head_dim, DecodedRows rows,
                         std::vector<uint8_t>& out) {
  const uint64_t width = unit_bytes(run.dtype);
  const uint64_t units = run.tokens * row_bytes(head_dim, run.dtype) / width;
  const uint8_t* p = r.take(units, width, run.part);
  if (rows == DecodedRows::copied || !kHostIsLittleEndian) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(units * width));
    le_to_host(p, out.data() + at, static_cast<size_t>(units), static_cast<size_t>(width));
  }
  return p;
}

HeadImage read_head(Reader& r, const SequenceImage& image, uint32_t version,
                    const std::string& where, DecodedRows rows) {
  r.at(where);
  HeadImage head;
  const int32_t n = r.i32("token count");
  head.effective_budget = r.i32("effective budget");
  head.seen = r.i64("seen count");
  head.demoted = version >= 5 ? r.i32("demoted token count") : 0;
  check_counters(n, head.demoted, head.seen, head.effective_budget, where);
  const auto count = static_cast<uint64_t>(n);
  const auto demoted = static_cast<uint64_t>(head.demoted);
  r.array(head.positions, count, 4, "positions");
  check_positions(head.positions, static_cast<size_t>(demoted), where);
  // The demoted rows lie just before the others: the first run's start is the rows'.
  const std::array<RowRun, 2> keys = row_runs(image, count, demoted, false);
  const std::array<RowRun, 2> values = row_runs(image, count, demoted, true);
  const uint8_t* k = read_rows(r, keys[0], image.head_dim, rows, head.k);
  read_rows(r, keys[1], image.head_dim, rows, head.k);
  const uint8_t* v = read_rows(r, values[0], image.head_dim, rows, head.v);
  read_rows(r, values[1], image.head_dim, rows, head.v);
  if (rows == DecodedRows::in_place && kHostIsLittleEndian) {
    head.k_in_place = k;
    head.v_in_place = v;
  }
  for (int s = 0; s < 3; ++s) {
    if ((image.stats & kStats[s].flag) == 0) continue;
    const std::string part = std::string(kStats[s].name) + " statistics";
    r.array(head.stats[s], count, 4, part.c_str());
  }
  return head;
}

// ------------------------------------------------------------------ storage conversion

// The first `kept` bytes of `rows` (a demoted tier's rows) as they are, then the n rows of
// `from` after them as f32 rows, by the format table's reference conversion.
std::vector<uint8_t> widen_to_f32(const uint8_t* rows, size_t kept, size_t n, int32_t head_dim,
                                  kvc_dtype from) {
  const size_t d = static_cast<size_t>(head_dim);
  std::vector<uint8_t> wide(kept + n * kvc_format_row_bytes(KVC_DTYPE_F32, d));
  if (kept > 0) std::memcpy(wide.data(), rows, kept);
  std::vector<float> row(d);
  for (size_t t = 0; t < n; ++t) {
    kvc_format_row_to_f32(from, rows + kept + t * kvc_format_row_bytes(from, d), row.data(), d);
    kvc_format_row_from_f32(KVC_DTYPE_F32, row.data(), wide.data() + kept + t * 4 * d, d);
  }
  return wide;
}

std::string lossy_reason(kvc_dtype from, kvc_dtype to) {
  if (kvc_format_has_scales(to)) {
    return std::string("quantizing to ") + kvc_format_name(to) + " would lose bits";
  }
  if (kvc_format_has_scales(from)) {
    return std::string(kvc_format_name(from)) + "'s values (integers times an f16 scale) need " +
           "more bits than " + kvc_format_name(to) + " holds";
  }
  if (from == KVC_DTYPE_F32) {
    return std::string("rounding f32 to ") + kvc_format_name(to) + " would lose bits";
  }
  if (from == KVC_DTYPE_F16) return "f16 has 10 mantissa bits, bf16 only 7";
  return "bf16 has an 8-bit exponent, f16 only 5: large and small values would not fit";
}

}  // namespace

size_t encoded_size(const SequenceImage& image) {
  return static_cast<size_t>(image_bytes(check_image(image, false)));
}

size_t encoded_size(int32_t layers, int32_t head_dim, kvc_dtype k_dtype, kvc_dtype v_dtype,
                    uint32_t stats, const std::vector<size_t>& head_tokens,
                    uint64_t offload_version, kvc_rotation k_rotation,
                    const std::optional<DemotedFormats>& demoted,
                    const std::vector<size_t>& head_demoted) {
  const uint32_t version =
      version_for(k_dtype, v_dtype, offload_version, k_rotation, demoted.has_value());
  const RecordBytes record = record_bytes(head_dim, k_dtype, v_dtype, stats, demoted, version);
  Sections s{0, kTriggerBytes * static_cast<uint64_t>(layers), header_bytes(version)};
  for (size_t h = 0; h < head_tokens.size(); ++h) {
    s.heads += record.of(head_tokens[h], head_demoted.empty() ? 0 : head_demoted[h]);
  }
  return static_cast<size_t>(image_bytes(s));
}

namespace {

// encode() with the rows from the image or, when `rows` is not null, from it; returns the
// bytes written.
size_t encode_rows_from(const SequenceImage& image, const RowWriter* rows, uint8_t* out,
                      size_t capacity) {
  const Sections s = check_image(image, rows != nullptr);
  const uint64_t size = image_bytes(s);
  if (capacity < size) {
    fail("a buffer of " + std::to_string(capacity) + " bytes is too small for the image's " +
         std::to_string(size));
  }
  Writer w(out);
  w.bytes(kMagic, sizeof kMagic);
  const uint32_t version = version_of(image);
  w.le(version);
  for (int32_t x : {image.layers, image.kv_heads, image.q_heads, image.head_dim}) {
    w.le(static_cast<uint32_t>(x));
  }
  w.le(static_cast<uint32_t>(image.k_dtype));
  w.le(static_cast<uint32_t>(image.layout));
  w.le(image.stats);
  w.le(s.heads);
  w.le(s.triggers);
  if (version >= 2) w.le(static_cast<uint32_t>(image.v_dtype));
  if (version >= 3) w.le(image.offload_version);
  if (version >= 4) w.le(static_cast<uint32_t>(image.k_rotation));
  if (version >= 5) {
    w.le(static_cast<uint32_t>(image.demoted->k_dtype));
    w.le(static_cast<uint32_t>(image.demoted->v_dtype));
  }
  for (size_t h = 0; h < image.heads.size(); ++h) {
    const HeadImage& head = image.heads[h];
    const size_t n = head.positions.size();
    const size_t demoted = static_cast<size_t>(head.demoted);
    w.le(static_cast<uint32_t>(n));
    w.le(static_cast<uint32_t>(head.effective_budget));
    w.le(static_cast<uint64_t>(head.seen));
    if (version >= 5) w.le(static_cast<uint32_t>(head.demoted));
    w.elements(head.positions.data(), n, 4);
    const std::array<RowRun, 2> keys = row_runs(image, n, demoted, false);
    const std::array<RowRun, 2> values = row_runs(image, n, demoted, true);
    uint8_t* k = w.skip(static_cast<size_t>(rows_bytes(keys, image.head_dim)));
    uint8_t* v = w.skip(static_cast<size_t>(rows_bytes(values, image.head_dim)));
    // Each run's rows little-endian, in units of its format: from the image's host-order
    // rows, or where the RowWriter wrote them.
    const auto put = [&](uint8_t* at, const uint8_t* host, const std::array<RowRun, 2>& runs) {
      for (const RowRun& run : runs) {
        const size_t width = unit_bytes(run.dtype);
        const size_t bytes = static_cast<size_t>(run.tokens * row_bytes(image.head_dim, run.dtype));
        if (host) {
          host_to_le(host, at, bytes / width, width);
          host += bytes;
        } else {
          host_to_le_in_place(at, bytes / width, width);
        }
        at += bytes;
      }
    };
    if (rows) rows->write(h, k, v);
    put(k, rows ? nullptr : head.k.data(), keys);
    put(v, rows ? nullptr : head.v.data(), values);
    for (int st = 0; st < 3; ++st) {
      if ((image.stats & kStats[st].flag) == 0) continue;
      w.elements(head.stats[st].data(), head.stats[st].size(), 4);
    }
  }
  for (const LayerTriggers& t : image.triggers) {
    w.le(static_cast<uint32_t>(t.decode_steps));
    w.le(static_cast<uint8_t>(t.prefill_pending ? 1 : 0));
  }
  w.le(checksum(out, static_cast<size_t>(w.position() - out)));
  return static_cast<size_t>(size);
}

}  // namespace

void encode(const SequenceImage& image, uint8_t* out, size_t capacity) {
  encode_rows_from(image, nullptr, out, capacity);
}

size_t encode(const SequenceImage& image, const RowWriter& rows, uint8_t* out, size_t capacity) {
  return encode_rows_from(image, &rows, out, capacity);
}

std::vector<uint8_t> encode(const SequenceImage& image) {
  std::vector<uint8_t> bytes(encoded_size(image));
  encode(image, bytes.data(), bytes.size());
  return bytes;
}

SequenceImage decode(const uint8_t* bytes, size_t n, DecodedRows rows) {
  Reader r(bytes, n);
  const Header h = read_header(r);
  check_envelope(h.sections, bytes, n);
  check_header(h.layers, h.kv_heads, h.q_heads, h.head_dim, h.k_dtype, h.v_dtype, h.layout,
               h.stats);
  check_rotation(h.k_rotation);
  if (h.demotes) check_formats(h.demoted_k_dtype, h.demoted_v_dtype, h.head_dim, "demoted ");
  SequenceImage image;
  image.layers = h.layers;
  image.kv_heads = h.kv_heads;
  image.q_heads = h.q_heads;
  image.head_dim = h.head_dim;
  image.k_dtype = static_cast<kvc_dtype>(h.k_dtype);
  image.v_dtype = static_cast<kvc_dtype>(h.v_dtype);
  image.layout = static_cast<kvc_layout>(h.layout);
  image.stats = h.stats;
  image.offload_version = h.offload_version;
  image.k_rotation = static_cast<kvc_rotation>(h.k_rotation);
  if (h.demotes) {
    image.demoted = DemotedFormats{static_cast<kvc_dtype>(h.demoted_k_dtype),
                                   static_cast<kvc_dtype>(h.demoted_v_dtype)};
  }

  const Sections& s = h.sections;
  const uint64_t head_count = static_cast<uint64_t>(image.layers) * image.kv_heads;
  if (head_count > s.heads / head_fixed_bytes(h.version)) {
    fail(std::to_string(image.layers) + " layers x " + std::to_string(image.kv_heads) +
         " KV heads do not fit in a head section of " + std::to_string(s.heads) + " bytes");
  }
  if (s.triggers != kTriggerBytes * static_cast<uint64_t>(image.layers)) {
    fail("a trigger section of " + std::to_string(s.triggers) + " bytes for " +
         std::to_string(image.layers) + " layers (" + std::to_string(kTriggerBytes) +
         " bytes each)");
  }

  Reader heads(bytes + s.header, static_cast<size_t>(s.heads));
  image.heads.reserve(static_cast<size_t>(head_count));
  for (size_t i = 0; i < head_count; ++i) {
    image.heads.push_back(read_head(heads, image, h.version, head_name(i, image.kv_heads), rows));
  }
  if (image.demoted && !any_demoted(image)) {
    fail("the header names demoted formats (" +
         std::string(kvc_format_name(image.demoted->k_dtype)) + " K, " +
         kvc_format_name(image.demoted->v_dtype) +
         " V) but no head holds demoted tokens (such an image is written in version 4 or older)");
  }
  if (heads.left() != 0) {
    fail("the head section has " + std::to_string(heads.left()) + " bytes after the last head");
  }

  Reader triggers(bytes + s.header + s.heads, static_cast<size_t>(s.triggers));
  image.triggers.resize(static_cast<size_t>(image.layers));
  for (size_t layer = 0; layer < image.triggers.size(); ++layer) {
    triggers.at("layer " + std::to_string(layer) + " triggers");
    const int32_t steps = triggers.i32("decode steps");
    const uint8_t pending = triggers.le<uint8_t>("prefill pending");
    check_trigger(steps, layer);
    if (pending > 1) {
      fail("layer " + std::to_string(layer) + " triggers: prefill pending is " +
           std::to_string(pending) + ", must be 0 or 1");
    }
    image.triggers[layer] = {steps, pending == 1};
  }
  return image;
}

void convert_storage(SequenceImage& image, kvc_dtype k_target, kvc_dtype v_target) {
  for (kvc_dtype target : {k_target, v_target}) {
    if (!kvc_format_is_valid(target)) fail("unknown target dtype " + std::to_string(target));
  }
  const std::pair<kvc_dtype, kvc_dtype> parts[] = {{image.k_dtype, k_target},
                                                   {image.v_dtype, v_target}};
  for (const auto& [from, to] : parts) {
    if (from != to && to != KVC_DTYPE_F32) {
      fail(KVC_ERR_UNSUPPORTED, std::string("cannot store ") + kvc_format_name(from) +
                                    " data in a " + kvc_format_name(to) + " cache without loss: " +
                                    lossy_reason(from, to) +
                                    " (only a conversion into f32 is exact)");
    }
  }
  const bool widen_k = image.k_dtype != k_target, widen_v = image.v_dtype != v_target;
  if (!widen_k && !widen_v) return;
  // All heads are converted before any is replaced, so a failed allocation changes nothing.
  std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> wide;
  wide.reserve(image.heads.size());
  for (const HeadImage& head : image.heads) {
    const size_t n = head.positions.size();
    const auto demoted = static_cast<size_t>(head.demoted);
    const std::array<RowRun, 2> keys = row_runs(image, n, demoted, false);
    const std::array<RowRun, 2> values = row_runs(image, n, demoted, true);
    const auto kept = [&](const RowRun& run) {
      return static_cast<size_t>(run.tokens * row_bytes(image.head_dim, run.dtype));
    };
    wide.emplace_back(
        widen_k ? widen_to_f32(head.k_rows(), kept(keys[0]), n - demoted, image.head_dim,
                               image.k_dtype)
                : std::vector<uint8_t>{},
        widen_v ? widen_to_f32(head.v_rows(), kept(values[0]), n - demoted, image.head_dim,
                               image.v_dtype)
                : std::vector<uint8_t>{});
  }
  for (size_t h = 0; h < image.heads.size(); ++h) {
    HeadImage& head = image.heads[h];
    if (widen_k) {
      head.k = std::move(wide[h].first);
      head.k_in_place = nullptr;
    }
    if (widen_v) {
      head.v = std::move(wide[h].second);
      head.v_in_place = nullptr;
    }
  }
  image.k_dtype = k_target;
  image.v_dtype = v_target;
}

}  // namespace kvc
