#!/usr/bin/env bash
# kit_dry_run.sh SOURCE_DIR BUILD_DIR: the device kit's dry run (kvc.device_kit). Makes the kit
# from BUILD_DIR as it is (bench/cuda/kit/make-kit --no-build, no size limit: a build with the
# examples links oneDNN and BLIS into kvc-bench), moves a copy of it to another folder and
# removes the original (the kit must not depend on where it was made), and runs the copy there
# with an empty environment and no visible CUDA device (CUDA_VISIBLE_DEVICES empty: on a GPU
# machine the kit's full run takes minutes and is KIT/run's job, not ctest's). Passes when the
# run exits 0 with "result": "passed" in summary.json, used the prebuilt binaries, says
# self_contained: yes, and, with no usable device, reported every suite that needs one as
# skipped and the others as passed; with a usable device (the variable not honoured), whatever
# the run decided. Exit 77 (skipped) when SOURCE_DIR is not a git checkout: make-kit packs the
# fallback's source with git.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCE_DIR BUILD_DIR" >&2
  exit 2
fi
source_dir=$1
build_dir=$2
if ! git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIPPED: $source_dir is not a git checkout (make-kit packs the source with git ls-files)"
  exit 77
fi

made=$(mktemp -d "${TMPDIR:-/tmp}/kvc-kit-made.XXXXXX")
moved=$(mktemp -d "${TMPDIR:-/tmp}/kvc-kit-moved.XXXXXX")
trap 'rm -rf "$made" "$moved"' EXIT
started=$(date +%s)

"$source_dir/bench/cuda/kit/make-kit" --build "$build_dir" --no-build --max-mib 0 "$made/kit"
cp -a "$made/kit" "$moved/kit"
rm -rf "$made/kit"

code=0
env -i CUDA_VISIBLE_DEVICES= "$moved/kit/run" "$made/out" > "$made/stdout" 2>&1 || code=$?
cat "$made/stdout"

problems=()
problem() { problems+=("$*"); }
[ "$code" = 0 ] || problem "the kit's run exited $code"
summary=$made/out/summary.json
log=$made/out/run.log
if [ ! -f "$summary" ] || [ ! -f "$log" ]; then
  problem "no summary.json or run.log in the run's output folder"
else
  echo "----- summary.json"
  cat "$summary"
  grep -q '"result": "passed"' "$summary" || problem "summary.json: result is not passed"
  grep -q '"path": "prebuilt binaries"' "$summary" ||
    problem "summary.json: the prebuilt binaries did not start (the run took the fallback path)"
  grep -qx 'self_contained: yes' "$log" || problem "run.log: not self_contained: yes"
  usable=$(sed -n 's/.*"cuda_backend_usable": \([0-9]*\).*/\1/p' "$summary")
  case $usable in
    0)
      while IFS=$'\t' read -r name needs_device _; do
        [ -n "$name" ] || continue
        if [ "$needs_device" = 1 ]; then want=skipped; else want=passed; fi
        grep -q "^suite $name: $want (" "$log" ||
          problem "run.log: suite $name is not reported $want without a device"
      done < "$moved/kit/suites.tsv"
      grep -qx 'benchmarks: skipped (no usable device)' "$log" ||
        problem "run.log: the benchmarks are not reported skipped without a device"
      ;;
    1) echo "kit_dry_run: the cuda backend found a usable device; the run decided" ;;
    *) problem "summary.json: no cuda_backend_usable" ;;
  esac
fi

if [ ${#problems[@]} -gt 0 ]; then
  printf 'kit_dry_run: %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "kit_dry_run: passed after $(( $(date +%s) - started ))s"
