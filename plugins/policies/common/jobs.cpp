#include "jobs.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "errors.hpp"

namespace kvc::policies {
namespace {

[[noreturn]] void bad_job(const kvc_score_job& job, size_t index, const char* problem) {
  char message[256];
  std::snprintf(message, sizeof message, "score job %zu (layer %d, KV head %d): %s", index,
                job.layer, job.kv_head, problem);
  argument_error(message);
}

}  // namespace

void check_job(const kvc_score_job& job, size_t index, uint32_t stats) {
  if (job.n_tokens < 0) bad_job(job, index, "n_tokens is negative");
  if (job.n_tokens == 0) return;
  if (job.scores == nullptr) bad_job(job, index, "scores is NULL");
  if (job.pos == nullptr) bad_job(job, index, "pos is NULL");
  if ((stats & KVC_STAT_ATTN_SUM) && job.attn_sum == nullptr) {
    bad_job(job, index, "attn_sum is NULL but the policy asks for KVC_STAT_ATTN_SUM");
  }
  if ((stats & KVC_STAT_ATTN_LAST) && job.attn_last == nullptr) {
    bad_job(job, index, "attn_last is NULL but the policy asks for KVC_STAT_ATTN_LAST");
  }
  if ((stats & KVC_STAT_ATTN_WINDOW) && job.attn_window == nullptr) {
    bad_job(job, index, "attn_window is NULL but the policy asks for KVC_STAT_ATTN_WINDOW");
  }
  if (stats & KVC_STAT_KEYS) {
    if (job.keys == nullptr) bad_job(job, index, "keys is NULL but the policy asks for KVC_STAT_KEYS");
    if (job.head_dim < 1) bad_job(job, index, "head_dim is < 1");
  }
}

ProtectedRange protected_range(const kvc_score_job& job) {
  if (job.sink_end < 0 || job.recent_begin < 0) {
    throw Error(KVC_ERR_PLUGIN,
                      "this policy needs the protected range of plugin ABI 1.1; the host is older");
  }
  if (job.sink_end > job.recent_begin || job.recent_begin > job.n_tokens) {
    argument_error("score job: sink_end <= recent_begin <= n_tokens does not hold");
  }
  return ProtectedRange{job.sink_end, job.recent_begin};
}

}  // namespace kvc::policies
