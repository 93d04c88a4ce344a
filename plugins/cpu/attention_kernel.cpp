#include "attention_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "attention_block.hpp"
#include "attention_split.hpp"
#include "attention_stats.hpp"
#include "parallel.hpp"
#include "plugin_error.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

// Query rows (tokens x group heads) that share one pass over K/V.
constexpr size_t kBlockRows = 64;
// Split-K aims at this many work items per hardware thread, in parts of at least
// kMinPartKeys keys: enough to balance the load, few enough that merging costs little.
constexpr size_t kItemsPerThread = 4;
constexpr size_t kMinPartKeys = 512;
constexpr size_t kWhole = SIZE_MAX;

// Queries [first, first + count) of one job over some of its keys: the unit of parallel
// work. A job with statistics is one item, so that no two threads add to the same statistic.
struct WorkItem {
  size_t job;
  size_t first;
  size_t count;
  KeyRange keys;
  StatsRequest stats;
  size_t part;  // index of its state in PartialStates, or kWhole when it sees all keys
};

// A query block split across key ranges: parts [first_part, first_part + n_parts).
struct SplitBlock {
  size_t job;
  size_t first;
  size_t count;
  size_t first_part;
  size_t n_parts;
};

struct WorkPlan {
  std::vector<WorkItem> items;
  std::vector<SplitBlock> splits;
  size_t n_parts = 0;
  size_t part_rows = 0;  // the most rows of a split block
};

// Which query rows the call's tiles score with: rounded to q8_0 for keys of a format with
// scales, exact for the others (kvc_format_query_format).
struct QueryRows {
  bool rounded = false;
  bool exact = false;
};

// Checks the call and its jobs, segments with formats of their own included: a job's q_dtype
// must be a query dtype of every K format among its segments (kvc_format_takes_input), so
// that it means the same whichever tier a key is in.
QueryRows validate(const kvc_attend_job* jobs, size_t n_jobs, const kvc_attend_call& config) {
  const StorageFormats call{config.storage_dtype, config.v_dtype};
  check_storage(config.head_dim, call);
  if (config.group_size <= 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "group_size must be > 0, got %d", config.group_size);
  QueryRows rows;
  bool call_keys = false;  // whether any keys are of the call's K format
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    if (!kvc_format_takes_input(config.storage_dtype, job.q_dtype))
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: K's format %s cannot take query dtype %d",
           j, kvc_format_name(config.storage_dtype), int(job.q_dtype));
    if (job.n_queries < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: negative n_queries %d", j, job.n_queries);
    count_tokens(job.segments, job.n_segments, "attend", j);
    check_segment_formats(job.segments, job.n_segments, config.head_dim, "attend", j);
    for (int32_t si = 0; si < job.n_segments; ++si) {
      const kvc_segment& segment = job.segments[si];
      if (!segment.own_formats) {
        call_keys = call_keys || segment.count > 0;
        continue;
      }
      if (!kvc_format_takes_input(segment.k_dtype, job.q_dtype))
        fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: segment %d's K format %s cannot take "
             "query dtype %d", j, si, kvc_format_name(segment.k_dtype), int(job.q_dtype));
      if (segment.count == 0) continue;
      (kvc_format_has_scales(segment.k_dtype) ? rows.rounded : rows.exact) = true;
    }
    if (requested_stats(job).window && config.observation_window < 1)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: attn_window needs observation_window >= 1, got %d", j,
           config.observation_window);
  }
  if (call_keys) (kvc_format_has_scales(call.k) ? rows.rounded : rows.exact) = true;
  return rows;
}

AttentionShape make_shape(const kvc_attend_call& config, QueryRows queries) {
  const size_t group = size_t(config.group_size);
  const size_t dim = size_t(config.head_dim);
  return {dim,
          padded_dim(dim),
          group,
          std::max<size_t>(1, kBlockRows / group),
          config.storage_dtype,
          config.v_dtype,
          config.scale,
          config.sliding_window,
          config.softcap,
          config.observation_window,
          &tile_kernels(),
          queries.rounded,
          queries.exact};
}

size_t split_parts(const kvc_attend_job* jobs, size_t n_jobs, const AttentionShape& s) {
  size_t blocks = 0;
  for (size_t j = 0; j < n_jobs; ++j)
    blocks += (size_t(jobs[j].n_queries) + s.queries_per_block - 1) / s.queries_per_block;
  const size_t wanted = kItemsPerThread * std::max(1u, std::thread::hardware_concurrency());
  return blocks == 0 || blocks >= wanted ? 1 : (wanted + blocks - 1) / blocks;
}

WorkPlan plan_work(const kvc_attend_job* jobs, size_t n_jobs, const AttentionShape& s) {
  const KeyRange all_keys{0, SIZE_MAX};
  const size_t parts_wanted = split_parts(jobs, n_jobs, s);
  WorkPlan plan;
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    const size_t n = size_t(job.n_queries);
    const StatsRequest stats = requested_stats(job);
    if (stats.any()) {
      if (n > 0) plan.items.push_back({j, 0, n, all_keys, stats, kWhole});
      continue;
    }
    const size_t keys = count_tokens(job.segments, job.n_segments, "attend", j);
    const size_t parts = std::min(parts_wanted, std::max<size_t>(1, keys / kMinPartKeys));
    for (size_t first = 0; first < n; first += s.queries_per_block) {
      const size_t count = std::min(s.queries_per_block, n - first);
      if (parts == 1) {
        plan.items.push_back({j, first, count, all_keys, stats, kWhole});
        continue;
      }
      plan.splits.push_back({j, first, count, plan.n_parts, parts});
      plan.part_rows = std::max(plan.part_rows, count * s.group_size);
      // Parts start on a multiple of kTileKeys so that their tiles stay full; tiles of any
      // length (a segment of other formats) are right too.
      auto boundary = [&](size_t p) {
        return p == parts ? keys : keys * p / parts / kTileKeys * kTileKeys;
      };
      for (size_t p = 0; p < parts; ++p)
        plan.items.push_back(
            {j, first, count, {boundary(p), boundary(p + 1)}, stats, plan.n_parts++});
    }
  }
  return plan;
}

void run_item(const kvc_attend_job& job, const WorkItem& item, const AttentionShape& s,
              AttentionWorkspace& w, PartialStates& partials) {
  if (item.stats.any()) reset_latest_stats(job);
  const size_t end = item.first + item.count;
  for (size_t first = item.first; first < end; first += s.queries_per_block) {
    const size_t count = std::min(s.queries_per_block, end - first);
    keep_logits_if(item.stats.any() && block_feeds_stats(job, item.stats, first, count, s), job,
                   count, s, w);
    attend_block(job, first, count, item.keys, s, w);
    if (item.part != kWhole) {
      partials.save(item.part, w);
      continue;
    }
    write_output(job, s, w);
    if (item.stats.any()) accumulate_stats(job, item.stats, s, w);
  }
}

}  // namespace

void run_attend(const kvc_host_api& host, const kvc_attend_job* jobs, const kvc_attend_call& config,
                kvc_rotation k_rotation) {
  const size_t n_jobs = config.n_jobs;
  const AttentionShape shape = make_shape(config, validate(jobs, n_jobs, config));
  const WorkPlan plan = plan_work(jobs, n_jobs, shape);
  PartialStates partials(plan.n_parts, plan.part_rows, shape);
  parallel_for(host, plan.items.size(), 1, [&](size_t begin, size_t end) {
    AttentionWorkspace& workspace = thread_workspace(shape);
    workspace.k_rotation = k_rotation;
    for (size_t i = begin; i < end; ++i)
      run_item(jobs[plan.items[i].job], plan.items[i], shape, workspace, partials);
  });
  parallel_for(host, plan.splits.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const SplitBlock& b = plan.splits[i];
      partials.merge(jobs[b.job], b.first, b.count, b.first_part, b.n_parts, shape);
    }
  });
}

}  // namespace kvc::cpu
