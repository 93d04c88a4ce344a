#include "kv_formats.hpp"

#include "common.hpp"
#include "kvcache/kvcache_format.h"
#include "report.hpp"

namespace kvc_bench {

std::string KvFormats::name() const {
  return k == v ? kvc_format_name(k) : std::string(kvc_format_name(k)) + "/" + kvc_format_name(v);
}

std::string KvFormats::key() const {
  return k == v ? kvc_format_name(k) : std::string(kvc_format_name(k)) + "_" + kvc_format_name(v);
}

bool KvFormats::quantized() const { return kvc_format_has_scales(k) || kvc_format_has_scales(v); }

size_t KvFormats::kv_row_bytes(int32_t head_dim) const {
  const size_t n = static_cast<size_t>(head_dim);
  const size_t k_bytes = kvc_format_row_bytes(k, n);
  const size_t v_bytes = kvc_format_row_bytes(v, n);
  return k_bytes == 0 || v_bytes == 0 ? 0 : k_bytes + v_bytes;
}

void KvFormats::apply(kvc_cache_params* params) const {
  params->dtype = k;
  params->k_dtype = k;
  params->v_dtype = v;
}

KvFormats parse_kv_formats(const std::string& text, const char* option) {
  const size_t slash = text.find('/');
  KvFormats formats;
  formats.k = parse_dtype(text.substr(0, slash), option);
  formats.v = slash == std::string::npos ? formats.k : parse_dtype(text.substr(slash + 1), option);
  return formats;
}

KvFormats read_kv_formats(Options& opts) {
  KvFormats formats;
  formats.k = formats.v = parse_dtype(opts.get_string("dtype", "f16"), "dtype");
  if (opts.has("k_format")) formats.k = parse_dtype(opts.get_string("k_format", ""), "k_format");
  if (opts.has("v_format")) formats.v = parse_dtype(opts.get_string("v_format", ""), "v_format");
  return formats;
}

bool kv_formats_given(const Options& opts) {
  return opts.has("dtype") || opts.has("k_format") || opts.has("v_format");
}

void check_head_dim(const KvFormats& formats, int32_t head_dim) {
  for (const kvc_dtype format : {formats.k, formats.v}) {
    if (kvc_format_row_bytes(format, static_cast<size_t>(head_dim)) == 0) {
      throw UsageError(std::string(kvc_format_name(format)) + " stores groups of " +
                       std::to_string(kvc_format_group_size(format)) +
                       " values: the head dimension " + std::to_string(head_dim) +
                       " is not a multiple of that");
    }
  }
}

void report_kv_formats(const std::string& prefix, const KvFormats& formats) {
  report(prefix + "k_format", kvc_format_name(formats.k));
  report(prefix + "v_format", kvc_format_name(formats.v));
}

}  // namespace kvc_bench
