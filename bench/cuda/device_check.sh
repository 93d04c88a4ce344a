#!/usr/bin/env bash
# bench/cuda/device_check.sh OUTDIR: the cuda backend's check on a machine with an NVIDIA GPU,
# from a fresh checkout, in under 8 minutes (docs/cuda.md). Configures and builds the project
# (Release, -j16, CUDA architecture 90 plus its PTX), runs every test labelled cuda (the
# backend-agnostic suites against the cuda backend, its host-device math, loading), then
# kvc-bench attention and compress with --backend cuda --json. Writes OUTDIR/device_check.log
# (everything), OUTDIR/attention.json, attention_block16.json and compress.json (the benches'
# figures), OUTDIR/ctest.txt and
# OUTDIR/device_check.json (all figures, the test counts, each step's exit status and time).
# KVC_DEVICE_CHECK_BUILD (build folder), KVC_DEVICE_CHECK_JOBS and KVC_DEVICE_CHECK_CMAKE_ARGS
# change how it builds.
# Exit 0: every step passed and attention_bw_fraction >= 0.7; 77: no NVIDIA GPU or no nvcc
# here (said in the log); 1: a step failed or a figure missed its target.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${KVC_DEVICE_CHECK_BUILD:-$root/build/device-check}
jobs=${KVC_DEVICE_CHECK_JOBS:-16}
# Extra configure arguments, split on spaces (such as compiler launchers).
read -r -a extra_args <<< "${KVC_DEVICE_CHECK_CMAKE_ARGS:-}"
log=$out/device_check.log
summary=$out/device_check.json
: > "$log"
started=$(date +%s)

say() { echo "$*" | tee -a "$log"; }

# Each step's exit status and seconds, for the summary.
steps_json=""
record() {  # NAME CODE SECONDS
  steps_json="$steps_json${steps_json:+, }\"$1\": {\"exit\": $2, \"seconds\": $3}"
}

# step NAME LIMIT STDOUT_FILE CMD...: runs CMD for at most LIMIT seconds; its stdout goes to
# STDOUT_FILE (or the log when empty), its stderr to the log. Returns CMD's status (124: the
# limit was reached).
step() {
  local name=$1 limit=$2 stdout=$3
  shift 3
  local t0 code=0
  t0=$(date +%s)
  say "== $name (at most ${limit}s): $*"
  if [ -n "$stdout" ]; then
    timeout --kill-after=10 "$limit" "$@" > "$stdout" 2>> "$log" || code=$?
  else
    timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1 || code=$?
  fi
  record "$name" "$code" "$(( $(date +%s) - t0 ))"
  say "== $name: exit $code after $(( $(date +%s) - t0 ))s"
  return "$code"
}

json_string() {  # a JSON string literal of $1
  printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n\t' '  ')"
}

write_summary() {  # STATUS REASON
  {
    echo "{"
    echo "  \"status\": $(json_string "$1"),"
    echo "  \"reason\": $(json_string "$2"),"
    echo "  \"device\": $(json_string "${device:-}"),"
    echo "  \"commit\": $(json_string "$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"),"
    echo "  \"seconds\": $(( $(date +%s) - started )),"
    echo "  \"steps\": {${steps_json}},"
    echo "  \"tests\": {\"total\": ${tests_total:-0}, \"failed\": ${tests_failed:-0}, \"skipped\": ${tests_skipped:-0}},"
    for bench in attention attention_block16 compress; do
      if [ -s "$out/$bench.json" ]; then
        echo "  \"$bench\": $(tail -n 1 "$out/$bench.json"),"
      else
        echo "  \"$bench\": null,"
      fi
    done
    echo "  \"attention_bw_fraction_target\": 0.7"
    echo "}"
  } > "$summary"
  say "device check: $1${2:+ ($2)}; figures in $summary, log in $log"
}

# ---------------------------------------------------------------- what this machine has
if ! device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1); then
  say "no NVIDIA GPU here: nvidia-smi: $device"
  device=""
  write_summary no_device "nvidia-smi found no GPU"
  exit 77
fi
say "device: $device"
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -z "$nvcc" ]; then
  say "no nvcc on PATH or in /usr/local/cuda/bin: the cuda backend cannot be built"
  write_summary no_device "no nvcc"
  exit 77
fi
say "nvcc: $nvcc ($("$nvcc" --version | tail -n 1))"

# ---------------------------------------------------------------- build
failed=""
if ! step configure 45 "" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$nvcc" "-DKVC_CUDA_ARCHITECTURES=90-real;90-virtual" \
    -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_DOCS=OFF -DKVC_BUILD_FFI_TESTS=OFF \
    ${extra_args[@]+"${extra_args[@]}"}; then
  write_summary failed "configure"
  exit 1
fi
if grep -q "the cuda backend is not built" "$log"; then
  write_summary failed "CMake did not find the CUDA compiler"
  exit 1
fi
if ! step build 180 "" cmake --build "$build" -j "$jobs"; then
  write_summary failed "build"
  exit 1
fi

# ---------------------------------------------------------------- tests
ctest_out=$out/ctest.txt
step tests 110 "$ctest_out" ctest --test-dir "$build" -L cuda --output-on-failure -j 4 \
  --timeout 100 || failed="$failed tests"
cat "$ctest_out" >> "$log"
tests_total=$(sed -n 's/.*tests failed out of \([0-9][0-9]*\).*/\1/p' "$ctest_out" | tail -n 1)
tests_failed=$(sed -n 's/.* \([0-9][0-9]*\) tests failed out of.*/\1/p' "$ctest_out" | tail -n 1)
tests_skipped=$(grep -c '(Skipped)' "$ctest_out" || true)
tests_total=${tests_total:-0}
tests_failed=${tests_failed:-0}
if [ "$tests_total" -eq 0 ]; then failed="$failed no-tests"; fi
# On a GPU machine a skipped cuda test means the backend found no usable device.
if [ "$tests_skipped" -gt 0 ]; then failed="$failed tests-skipped"; fi

# ---------------------------------------------------------------- benchmarks
bench=$build/bin/kvc-bench
# The target figure: blocks of 256 tokens, so that the segment lists each call carries to the
# device stay short (docs/cuda.md); then the default 16-token blocks, for information.
step attention 60 "$out/attention.json" "$bench" attention --backend=cuda --tokens=8192 \
  --batch=32 --q_heads=32 --kv_heads=8 --head_dim=128 --dtype=f16 --block_tokens=256 \
  --json || failed="$failed attention"
step attention_block16 35 "$out/attention_block16.json" "$bench" attention --backend=cuda \
  --tokens=8192 --batch=32 --q_heads=32 --kv_heads=8 --head_dim=128 --dtype=f16 \
  --block_tokens=16 --reps=5 --prefill_reps=1 --json || failed="$failed attention_block16"
step compress 40 "$out/compress.json" "$bench" compress --backend=cuda --tokens=8192 --reps=3 \
  --json || failed="$failed compress"
for bench_json in "$out/attention.json" "$out/attention_block16.json" "$out/compress.json"; do
  if [ -s "$bench_json" ]; then say "$(basename "$bench_json"): $(tail -n 1 "$bench_json")"; fi
done

fraction=$(grep -o '"attention_bw_fraction": [-0-9.e+]*' "$out/attention.json" 2>/dev/null |
  head -n 1 | sed 's/.*: //' || true)
if [ -z "$fraction" ]; then
  failed="$failed no-fraction"
elif ! awk -v f="$fraction" 'BEGIN { exit !(f >= 0.7) }'; then
  failed="$failed attention_bw_fraction=$fraction<0.7"
fi

if [ -n "$failed" ]; then
  write_summary failed "${failed# }"
  exit 1
fi
write_summary passed "attention_bw_fraction=$fraction"
