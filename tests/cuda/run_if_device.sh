#!/bin/sh
# run_if_device.sh PROBE COMMAND [ARGS...]: runs COMMAND when kvc-cuda-probe finds a usable
# CUDA device; exits 77 (ctest: SKIPPED) with the probe's reason when there is none.
set -u
probe=$1
shift
reason=$("$probe" 2>&1)
case $? in
  0) exec "$@" ;;
  77) echo "SKIPPED: no usable CUDA device for the cuda backend: $reason"; exit 77 ;;
  *) echo "the CUDA probe failed: $reason"; exit 1 ;;
esac
