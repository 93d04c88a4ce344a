#include "machine.hpp"

#include <fstream>
#include <string>
#include <thread>

#include "report.hpp"

namespace kvc_bench {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "unknown";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown";
  return one + " " + five + " " + fifteen;
}

}  // namespace

void report_machine() {
  report("cpu_model", cpu_model());
  report("cpus", std::thread::hardware_concurrency());
  report("load_average", load_average());
}

}  // namespace kvc_bench
