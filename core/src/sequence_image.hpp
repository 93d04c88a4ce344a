// One sequence of a cache as plain data, and its on-disk format (docs/sequence_format.md):
// encode, decode with every field checked, and the exact storage conversions an import into
// a cache of another dtype may make. Knows nothing of the Cache class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvc {

// One (layer, KV head); tokens in storage order: its demoted tier first (the first `demoted`
// tokens, rows of the image's demoted formats), then the others (rows of the image's own
// formats), each tier in position order.
struct HeadImage {
  std::vector<int32_t> positions;  // [n]
  // [n] rows of the K and V formats, raw storage bytes: the demoted tier's rows, then the others'
  std::vector<uint8_t> k, v;
  int32_t demoted = 0;  // tokens of the demoted tier, first
  // An image decoded with its rows in place leaves k and v empty, and these pointing at the
  // same bytes where they lie in the decoded buffer; k_rows() and v_rows() say where they are.
  const uint8_t* k_in_place = nullptr;
  const uint8_t* v_in_place = nullptr;
  const uint8_t* k_rows() const { return k_in_place ? k_in_place : k.data(); }
  const uint8_t* v_rows() const { return v_in_place ? v_in_place : v.data(); }
  // attn_sum, attn_last, attn_window (kStoredStats order): [n] each, or empty when that
  // statistic is not in the image's `stats`.
  std::vector<float> stats[3];
  int64_t seen = 0;               // tokens ever appended to the head
  int32_t effective_budget = -1;  // the budget the policy last gave it, -1: none
};

// The storage formats of the heads' demoted tiers (policy.demote).
struct DemotedFormats {
  kvc_dtype k_dtype = KVC_DTYPE_F32;
  kvc_dtype v_dtype = KVC_DTYPE_F32;
  bool operator==(const DemotedFormats& o) const {
    return k_dtype == o.k_dtype && v_dtype == o.v_dtype;
  }
  bool operator!=(const DemotedFormats& o) const { return !(*this == o); }
};

struct LayerTriggers {
  int32_t decode_steps = 0;
  bool prefill_pending = false;
};

struct SequenceImage {
  int32_t layers = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  kvc_dtype k_dtype = KVC_DTYPE_F32;  // storage formats of the cache it came from
  kvc_dtype v_dtype = KVC_DTYPE_F32;
  kvc_layout layout = KVC_LAYOUT_PAGED;
  kvc_rotation k_rotation = KVC_ROTATION_NONE;  // of the K rows (kvcache_rotation.h)
  uint32_t stats = 0;                   // kvc_stat_flags of the statistics present
  // The version kvc_seq_offload gave the value (offload_version.hpp); 0: none, as in an
  // export or a prefix chunk.
  uint64_t offload_version = 0;
  // Present exactly when some head holds demoted tokens (HeadImage::demoted > 0).
  std::optional<DemotedFormats> demoted;
  std::vector<HeadImage> heads;         // [layer * kv_heads + kv_head]
  std::vector<LayerTriggers> triggers;  // [layer]
};

// The newest format version this build writes and reads: version 2 adds the V format to the
// header, version 3 the offload version, version 4 the rotation of K, version 5 demoted tiers
// (the demoted formats in the header, a demoted count in each head). Each image is written in
// the oldest version that holds it (1 when K and V share a format, there is no offload
// version, K is not rotated and no token is demoted), which older builds read too.
constexpr uint32_t kSequenceFormatVersion = 5;

// The exact byte count of encode(image). Throws kvc::Error INVALID_ARGUMENT when the image is
// not one decode() would accept (sizes, positions, counters), naming what is wrong.
size_t encoded_size(const SequenceImage& image);
// The byte count of encode() of an image of `layers` layers whose heads hold head_tokens[h]
// tokens of head_dim values stored as k_dtype and v_dtype, with the statistics of `stats` and
// `offload_version`, without the image (nothing is checked). With `demoted`, head_demoted[h]
// of head h's tokens (all heads, or none when empty) are stored in those formats instead.
size_t encoded_size(int32_t layers, int32_t head_dim, kvc_dtype k_dtype, kvc_dtype v_dtype,
                    uint32_t stats, const std::vector<size_t>& head_tokens,
                    uint64_t offload_version = 0, kvc_rotation k_rotation = KVC_ROTATION_NONE,
                    const std::optional<DemotedFormats>& demoted = std::nullopt,
                    const std::vector<size_t>& head_demoted = {});
// Writes the image to out[0, encoded_size(image)); throws kvc::Error INVALID_ARGUMENT, writing
// nothing, when capacity is smaller or the image is inconsistent.
void encode(const SequenceImage& image, uint8_t* out, size_t capacity);
// The same bytes in a new buffer.
std::vector<uint8_t> encode(const SequenceImage& image);

// Writes the K and V rows of head h of an image (in host order, HeadImage::k's layout) where
// the encoder will store them: an exporter copies them from storage straight into the bytes.
class RowWriter {
 public:
  virtual void write(size_t head, uint8_t* k, uint8_t* v) const = 0;

 protected:
  ~RowWriter() = default;
};
// encode(image, out, capacity) for an image whose heads leave k and v empty: `rows` writes
// them. The same bytes; the same checks but for the rows' sizes, which are rows' to keep.
// Returns the bytes written.
size_t encode(const SequenceImage& image, const RowWriter& rows, uint8_t* out, size_t capacity);
// Where decode() leaves an image's K and V rows: copied into each head's k and v, or, on a
// little-endian host (where the encoded rows are the host's), in place in the decoded bytes,
// which must then outlive the image. An import appends them straight from there: a copy of
// the whole image into fresh arrays was most of its time (docs/stores.md). Elsewhere
// in_place copies them.
enum class DecodedRows { copied, in_place };

// Reads an image; throws kvc::Error naming what is wrong: UNSUPPORTED for a newer format
// version, INVALID_ARGUMENT for anything else (truncated, corrupted, inconsistent). encode()
// takes images with their rows copied.
SequenceImage decode(const uint8_t* bytes, size_t n, DecodedRows rows = DecodedRows::copied);

// Makes the image one a cache storing K as `k_target` and V as `v_target` holds: rows of the
// same format are left as they are, f16 and bf16 become f32 exactly. Anything lossy (f32 -> f16
// or bf16, f16 <-> bf16) throws kvc::Error UNSUPPORTED saying why, leaving the image unchanged.
// Only the rows of the image's own formats are converted: demoted tiers stay as they are.
void convert_storage(SequenceImage& image, kvc_dtype k_target, kvc_dtype v_target);

}  // namespace kvc
