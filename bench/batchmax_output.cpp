// kvc-bench batchmax: the results as a table on stdout, a CSV file and a gnuplot PNG.
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "batchmax.hpp"
#include "common.hpp"

extern char** environ;

namespace kvc_bench {
namespace batchmax {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// `s` as a single-quoted gnuplot string ('' stands for a quote inside one).
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("''") : std::string(1, c);
  return out + "'";
}

// True when an executable `name` is on PATH.
bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string file = dir + "/" + name;
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0)
      return true;
    start = end + 1;
  }
  return false;
}

// Runs `gnuplot script` and returns its exit status (-1 if it could not be started).
int run_gnuplot(const std::string& script) {
  std::string prog = "gnuplot";
  std::vector<char*> argv = {prog.data(), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

void print_table(const std::vector<ModeResult>& results, size_t memory_limit) {
  bool nll = false;
  for (const ModeResult& r : results) nll = nll || r.has_nll;
  std::printf("\nMemory limit %.2f MiB (%zu bytes) for K/V and the engine's activations, the "
              "same for every mode\n\n",
              mib(memory_limit), memory_limit);
  std::printf("%-16s %-9s %-7s %-9s %5s %9s %5s %11s %11s %8s %8s %9s %8s %13s %10s", "mode",
              "format", "policy", "prefill", "chunk", "max_batch", "waves", "est_seq_MiB",
              "peak_kv_MiB", "act_MiB", "peak_MiB", "prefill_s", "decode_s", "decode_tok/s",
              "e2e_tok/s");
  if (nll) std::printf(" %9s", "nll");
  std::printf("\n");
  for (const ModeResult& r : results) {
    std::printf("%-16s %-9s %-7s %-9s %5d %9d %5d %11.2f %11.2f %8.2f %8.2f %9.2f %8.2f %13.1f "
                "%10.2f",
                r.mode.c_str(), r.formats.name().c_str(), r.policy.c_str(), r.prefill.c_str(),
                r.chunk_tokens, r.max_batch, r.waves, mib(r.estimate_bytes), mib(r.bytes_peak),
                mib(r.activation_bytes), mib(r.peak_bytes()), r.prefill_s, r.decode_s,
                r.decode_tokens_per_s(), r.end_to_end_tokens_per_s());
    if (nll) {
      if (r.has_nll) {
        std::printf(" %9.4f", r.nll);
      } else {
        std::printf(" %9s", "-");
      }
    }
    std::printf("\n");
  }
  std::printf("\n");
  std::fflush(stdout);
}

void write_csv(const std::string& path, const std::vector<ModeResult>& results,
               size_t memory_limit) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw Error("cannot write the CSV file '" + path + "'");
  out << "mode,policy,prefill,max_batch,waves,estimate_seq_bytes,peak_kv_bytes,limit_bytes,"
         "prefill_s,decode_s,total_s,prefill_tokens_per_s,decode_tokens_per_s,"
         "end_to_end_tokens_per_s,tokens_evicted,nll,prefill_cpu_s,decode_cpu_s,chunk_tokens,"
         "activation_bytes,peak_bytes,format\n";
  char line[512];
  for (const ModeResult& r : results) {
    std::snprintf(line, sizeof line, "%s,%s,%s,%d,%d,%zu,%zu,%zu,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f,%llu,",
                  r.mode.c_str(), r.policy.c_str(), r.prefill.c_str(), r.max_batch, r.waves,
                  r.estimate_bytes, r.bytes_peak, memory_limit, r.prefill_s, r.decode_s,
                  r.total_s, r.prefill_tokens_per_s(), r.decode_tokens_per_s(),
                  r.end_to_end_tokens_per_s(), static_cast<unsigned long long>(r.tokens_evicted));
    out << line;
    if (r.has_nll) {
      std::snprintf(line, sizeof line, "%.6f", r.nll);
      out << line;
    }
    std::snprintf(line, sizeof line, ",%.6f,%.6f,%d,%zu,%zu,%s\n", r.prefill_cpu_s,
                  r.decode_cpu_s, r.chunk_tokens, r.activation_bytes, r.peak_bytes(),
                  r.formats.name().c_str());
    out << line;
  }
  out.close();
  if (!out) throw Error("error while writing the CSV file '" + path + "'");
}

std::string plot_png(const std::string& csv_path, const std::string& png_path,
                     const std::string& title, size_t memory_limit) {
  if (!on_path("gnuplot")) {
    return "gnuplot not found on PATH: no PNG drawn (install Debian's gnuplot-nox)";
  }
  std::string script = png_path;
  const size_t dot = script.rfind('.');
  const size_t slash = script.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) script.resize(dot);
  script += ".gp";

  std::ofstream gp(script, std::ios::trunc);
  if (!gp) return "cannot write the gnuplot script '" + script + "': no PNG drawn";
  // Columns of the CSV: 1 mode, 4 max_batch, 7 peak K/V bytes, 13 decode tokens/s,
  // 14 end-to-end tokens/s, 20 activation bytes, 21 peak bytes, 22 K/V format; a bar is
  // labelled with its mode and format.
  const char* const xtic = "xtic(strcol(1).' '.strcol(22))";
  char limit_mib[32];
  std::snprintf(limit_mib, sizeof limit_mib, "%.3f", mib(memory_limit));
  gp << "# Written by `kvc-bench batchmax`; redraw with: gnuplot " << script << "\n"
     << "set terminal pngcairo size 1650,560 font 'sans,11'\n"
     << "set termoption noenhanced\n"
     << "set output " << gp_quote(png_path) << "\n"
     << "set datafile separator ','\n"
     << "set style data histograms\n"
     << "set style histogram clustered gap 1\n"
     << "set style fill solid 0.85 border -1\n"
     << "set grid ytics\n"
     << "set yrange [0:*]\n"
     << "set offsets 0, 0, graph 0.12, 0\n"
     << "set key top left\n"
     << "set xtics rotate by -20\n"
     << "set multiplot layout 1,3 title " << gp_quote(title) << "\n"
     << "set title 'max batch under the memory limit'\n"
     << "set ylabel 'sequences'\n"
     << "plot " << gp_quote(csv_path)
     << " skip 1 using 4:" << xtic << " title 'max batch' lc rgb '#4472c4', \\\n"
     << "     '' skip 1 using 0:4:(sprintf('%d', $4)) with labels offset 0,0.8 notitle\n"
     << "set title 'peak memory: K/V + activations'\n"
     << "set ylabel 'MiB'\n"
     << "set style histogram rowstacked\n"
     << "set boxwidth 0.6 relative\n"
     << "set yrange [0:" << limit_mib << " * 1.2]\n"
     << "set arrow 1 from graph 0, first " << limit_mib << " to graph 1, first " << limit_mib
     << " nohead dt 2 lw 2 lc rgb '#c00000'\n"
     << "set label 1 'limit " << limit_mib << " MiB' at graph 0.02, first " << limit_mib
     << " offset 0,0.7 tc rgb '#c00000'\n"
     << "plot " << gp_quote(csv_path)
     << " skip 1 using ($7/1048576):" << xtic << " title 'K/V (bytes_peak)' lc rgb '#5b9bd5', \\\n"
     << "     '' skip 1 using ($20/1048576) title 'activations' lc rgb '#a5a5a5', \\\n"
     << "     '' skip 1 using 0:($21/1048576):(sprintf('%.2f', $21/1048576)) with labels "
        "offset 0,0.8 notitle\n"
     << "unset arrow 1\n"
     << "unset label 1\n"
     << "set yrange [0:*]\n"
     << "unset boxwidth\n"
     << "set style histogram clustered gap 1\n"
     << "set title 'generated tokens/s'\n"
     << "set ylabel 'tokens/s'\n"
     << "plot " << gp_quote(csv_path)
     << " skip 1 using 13:" << xtic << " title 'decode phase' lc rgb '#ed7d31', \\\n"
     << "     '' skip 1 using 14 title 'end to end (prefill included)' lc rgb '#70ad47', \\\n"
     << "     '' skip 1 using ($0-1.0/6):13:(sprintf('%.1f', $13)) with labels offset 0,0.8 "
        "notitle, \\\n"
     << "     '' skip 1 using ($0+1.0/6):14:(sprintf('%.2f', $14)) with labels offset 0,0.8 "
        "notitle\n"
     << "unset multiplot\n";
  gp.close();
  if (!gp) return "cannot write the gnuplot script '" + script + "': no PNG drawn";

  const int rc = run_gnuplot(script);
  if (rc != 0) {
    return "gnuplot " + script + " failed (exit status " + std::to_string(rc) + "): no PNG drawn";
  }
  return "";
}

}  // namespace batchmax
}  // namespace kvc_bench
