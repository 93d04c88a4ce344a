// kvc-bench: `kvc-bench <subcommand> [--key=value ...]`. Each subcommand prints `name=value`
// lines on stdout; errors go to stderr with exit status 1, bad usage with exit status 2.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common.hpp"
#include "options.hpp"
#include "report.hpp"
#include "subcommands.hpp"

namespace {

using namespace kvc_bench;

struct Subcommand {
  const char* name;
  const char* summary;
  const char* help;  // option list, printed by `kvc-bench <name> --help`
  RunFn run;
};

// One row per subcommand.
const Subcommand kSubcommands[] = {
    {"growth", "append tokens one at a time: contiguous and paged vs re-allocating each step",
     kGrowthHelp, run_growth},
    {"compress", "compress a cache to half vs one decode attention step over it", kCompressHelp,
     run_compress},
    {"fork", "fork a sequence 16 ways: one fork vs one decode attention step, memory vs copies",
     kForkHelp, run_fork},
    {"attention", "decode attention, append and prefill attention vs memory bandwidth",
     kAttentionHelp, run_attention},
    {"scaling", "cold decode attention at 1 thread vs all, over the read bandwidth's own scaling",
     kScalingHelp, run_scaling},
    {"store",
     "offload/restore one sequence through each store vs memcpy, file write/read and"
     " redis-benchmark",
     kStoreHelp, run_store},
    {"batchmax",
     "main demo: one memory limit (K/V + activations); max batch, peak memory and tokens/s of"
     " full cache, compress once (chunked or layer-wise), compress per prefill chunk (also with"
     " q8_0 and q8_0/q4_0 K/V)",
     kBatchmaxHelp, run_batchmax},
    {"prefix",
     "16 requests sharing a 2048-token system prompt, and a 4-turn chat, without and with the"
     " prefix cache: prefill tokens, peak K/V, time to first token, logits bit-identical",
     kPrefixHelp, run_prefix},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kvc-bench <subcommand> [--key=value ...] [--json]\n"
               "       kvc-bench <subcommand> --help\n\n"
               "--json prints the values as one JSON object instead of name=value lines.\n"
               "A key takes '-' or '_' alike: --k-format is --k_format.\n\n"
               "subcommands:\n");
  for (const Subcommand& sc : kSubcommands) {
    std::fprintf(out, "  %-12s %s\n", sc.name, sc.summary);
  }
}

void print_help(std::FILE* out, const Subcommand& sc) {
  std::fprintf(out, "usage: kvc-bench %s [--key=value ...]\n%s\n\noptions:\n%s", sc.name,
               sc.summary, sc.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  const Subcommand* sc = nullptr;
  for (const Subcommand& s : kSubcommands) {
    if (name == s.name) sc = &s;
  }
  if (sc == nullptr) {
    std::fprintf(stderr, "kvc-bench: unknown subcommand '%s'\n\n", name.c_str());
    print_usage(stderr);
    return 2;
  }
  try {
    // --json, for every subcommand: the values as one JSON object instead of name=value lines.
    Options opts(arguments_taking_json(2, argc, argv));
    if (opts.help()) {
      print_help(stdout, *sc);
      return 0;
    }
    const int status = sc->run(opts);
    finish_report();
    return status;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kvc-bench %s: %s\n\n", sc->name, e.what());
    print_help(stderr, *sc);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvc-bench %s: error: %s\n", sc->name, e.what());
    finish_failed_report(e.what());
    return 1;
  }
}
