#!/bin/sh
# generate_samples.sh KVC_LLAMA MODEL TOKENIZER: `kvc-llama generate --samples 3` (one prefill,
# two forks, the three branches decoded as one batch) must print, for sample i, exactly what
# a separate unforked run with seed S+i prints.
set -eu
kvl=$1 model=$2 tokenizer=$3
run() { "$kvl" generate --model "$model" --tokenizer "$tokenizer" --prompt "Once upon a time" \
          --steps 48 --temperature 1.0 "$@" 2>/dev/null; }
forked=$(run --seed 11 --samples 3)
status=0
for i in 0 1 2; do
  seed=$((11 + i))
  expected=$(run --seed "$seed")
  # The lines of sample i: after its header, up to the next header.
  got=$(printf '%s\n' "$forked" | awk -v h="--- sample $i (seed $seed) ---" \
          '$0 == h {on = 1; next} /^--- sample / {on = 0} on')
  if [ "$got" = "$expected" ]; then
    echo "sample $i (seed $seed): matches the unforked run"
  else
    echo "sample $i (seed $seed) differs from the unforked run:"
    echo "  forked:   $got"
    echo "  unforked: $expected"
    status=1
  fi
done
distinct=$(printf '%s\n' "$forked" | grep -v '^--- sample' | sort -u | wc -l)
[ "$distinct" -ge 2 ] || { echo "the samples are all the same: sampling does not use its seed"; status=1; }
exit $status
