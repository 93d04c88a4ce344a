// How an attend call is cut into thread blocks (host code, shared with the CPU tests): each
// job's rows (query, group head) in tiles of at most rows_per_item, and, when the call has too
// few tiles to fill the device (decode of a small batch over a long cache), each tile also
// split across ranges of keys (split-K) whose partial states a merge step combines.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "device_types.hpp"

namespace kvc::cuda {

struct PlanJob {
  int32_t n_rows;  // n_queries * group
  int32_t n_keys;
};

struct AttendPlan {
  std::vector<WorkItem> items;
  std::vector<SplitRows> splits;
  int32_t n_parts = 0;
};

// Parts hold at least this many keys: fewer would cost more in merging than they gain. The
// merge holds at most kMaxParts parts of a row.
constexpr int32_t kMinPartKeys = 256;
constexpr int32_t kMaxParts = 64;

// target_blocks: thread blocks that keep the device busy (a few per multiprocessor).
inline AttendPlan plan_attend(const std::vector<PlanJob>& jobs, int32_t rows_per_item,
                              int64_t target_blocks) {
  int64_t tiles = 0;
  for (const PlanJob& job : jobs) tiles += (job.n_rows + rows_per_item - 1) / rows_per_item;
  const int64_t wanted = tiles == 0 || tiles >= target_blocks
                             ? 1
                             : std::min<int64_t>(kMaxParts, (target_blocks + tiles - 1) / tiles);
  AttendPlan plan;
  for (int32_t j = 0; j < int32_t(jobs.size()); ++j) {
    const PlanJob& job = jobs[size_t(j)];
    const int32_t parts =
        int32_t(std::min<int64_t>(wanted, std::max<int32_t>(1, job.n_keys / kMinPartKeys)));
    for (int32_t row = 0; row < job.n_rows; row += rows_per_item) {
      const int32_t n_rows = std::min(rows_per_item, job.n_rows - row);
      if (parts == 1) {
        plan.items.push_back({j, row, n_rows, 0, job.n_keys, -1});
        continue;
      }
      plan.splits.push_back({j, row, n_rows, plan.n_parts, parts});
      for (int32_t p = 0; p < parts; ++p) {
        const int32_t begin = int32_t(int64_t(job.n_keys) * p / parts);
        const int32_t end = int32_t(int64_t(job.n_keys) * (p + 1) / parts);
        plan.items.push_back({j, row, n_rows, begin, end, plan.n_parts++});
      }
    }
  }
  return plan;
}

}  // namespace kvc::cuda
