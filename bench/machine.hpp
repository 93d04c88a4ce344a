// The machine a benchmark ran on, so that figures from a busy or different machine can be
// told apart.
#pragma once

namespace kvc_bench {

/// Prints cpu_model (from /proc/cpuinfo), cpus, and load_average (the 1, 5 and 15 minute
/// load averages of /proc/loadavg as the run starts: other work competing for the cores).
void report_machine();

}  // namespace kvc_bench
