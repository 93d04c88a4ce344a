#include "attention_kernel.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention_block.hpp"
#include "attention_stats.hpp"
#include "parallel.hpp"
#include "plugin_error.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

// Query rows (tokens x group heads) that share one pass over K/V.
constexpr size_t kBlockRows = 64;

// Queries [first, first + count) of one job: the unit of parallel work. A job with
// statistics is one item, so that no two threads add to the same statistic.
struct WorkItem {
  size_t job;
  size_t first;
  size_t count;
  StatsRequest stats;
};

kvc_attend_config read_config(const kvc_attend_config& given) {
  // Fields a smaller (older) struct lacks read as zero.
  kvc_attend_config config{};
  std::memcpy(&config, &given, std::min<size_t>(given.struct_size, sizeof config));
  return config;
}

void validate(const kvc_attend_job* jobs, size_t n_jobs, const kvc_attend_config& config) {
  check_storage(config.head_dim, config.storage_dtype);
  if (config.group_size <= 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "group_size must be > 0, got %d", config.group_size);
  check_jobs(jobs, n_jobs, "attend");
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    if (job.q_dtype != config.storage_dtype && job.q_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: query dtype %d is neither f32 nor the storage dtype", j,
           int(job.q_dtype));
    if (job.n_queries < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: negative n_queries %d", j, job.n_queries);
    count_tokens(job.segments, job.n_segments, "attend", j);
    if (requested_stats(job).window && config.observation_window < 1)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: attn_window needs observation_window >= 1, got %d", j,
           config.observation_window);
  }
}

AttentionShape make_shape(const kvc_attend_config& config) {
  const size_t group = size_t(config.group_size);
  return {size_t(config.head_dim),
          group,
          std::max<size_t>(1, kBlockRows / group),
          config.storage_dtype,
          config.scale,
          config.sliding_window,
          config.softcap,
          config.observation_window};
}

std::vector<WorkItem> split_work(const kvc_attend_job* jobs, size_t n_jobs,
                                 const AttentionShape& s) {
  std::vector<WorkItem> items;
  for (size_t j = 0; j < n_jobs; ++j) {
    const size_t n = size_t(jobs[j].n_queries);
    const StatsRequest stats = requested_stats(jobs[j]);
    const size_t per_item = stats.any() ? n : s.queries_per_block;
    for (size_t first = 0; first < n; first += per_item)
      items.push_back({j, first, std::min(per_item, n - first), stats});
  }
  return items;
}

void run_item(const kvc_attend_job& job, const WorkItem& item, const AttentionShape& s,
              AttentionWorkspace& w) {
  if (item.stats.any()) reset_latest_stats(job);
  const size_t end = item.first + item.count;
  for (size_t first = item.first; first < end; first += s.queries_per_block) {
    attend_block(job, first, std::min(s.queries_per_block, end - first), s, w);
    if (item.stats.any()) accumulate_stats(job, item.stats, s, w);
  }
}

}  // namespace

void run_attend(const kvc_host_api& host, const kvc_attend_job* jobs, size_t n_jobs,
                const kvc_attend_config& given_config) {
  const kvc_attend_config config = read_config(given_config);
  validate(jobs, n_jobs, config);
  const AttentionShape shape = make_shape(config);
  const std::vector<WorkItem> items = split_work(jobs, n_jobs, shape);
  parallel_for(host, items.size(), 1, [&](size_t begin, size_t end) {
    AttentionWorkspace workspace(shape);
    for (size_t i = begin; i < end; ++i) run_item(jobs[items[i].job], items[i], shape, workspace);
  });
}

}  // namespace kvc::cpu
