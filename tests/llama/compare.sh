#!/bin/sh
# compare.sh KVC_LLAMA MODEL TOKENIZER TEXT OUT_DIR [GGUF IDS]: `kvc-llama compare` on
# stories260K: a config against itself gives KL exactly 0 and agreements of 1, and the
# config's perplexity is `ppl`'s for that config; a bf16 cache and an evicting policy against
# f32 give KL > 0; a bad --baseline-config is refused with an error naming it. With GGUF and
# IDS (SmolLM2-135M), q4_0 K/V against f16 gives KL > 0 and top-1 agreement < 1.
set -eu
kvl=$1 model=$2 tokenizer=$3 text=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
status=0
fail() { echo "FAIL: $*"; status=1; }

# The value of `name=value` in file $1.
value() { sed -n "s/^$2=//p" "$1"; }
# Succeeds when awk's comparison "$1 $2 $3" of two numbers holds.
holds() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }

printf 'cache: { dtype: f32 }\n' > "$out/f32.yaml"
printf 'cache: { dtype: bf16 }\n' > "$out/bf16.yaml"
snapkv='policy: { name: snapkv, budget: 0.25, compress: { prefill: per_chunk } }'
printf 'cache: { dtype: f32 }\n%s\n' "$snapkv" > "$out/snapkv.yaml"
printf 'cache: { dtype: f64 }\n' > "$out/bad.yaml"
common="--model $model --tokenizer $tokenizer --text $text --window 128 --tokens 254 --chunk 32"

# A config against itself.
"$kvl" compare $common --generate 32 --config "$out/f32.yaml" --baseline-config "$out/f32.yaml" \
  > "$out/self.out" 2> "$out/self.err" || fail "compare against itself exited with $?"
for pair in kl=0 nll_delta=0.000000 top1_agreement=1.000000 generate.agreement=1.000000 \
            generate.identical_runs=2 windows=2 scored_tokens=254; do
  grep -qx "$pair" "$out/self.out" ||
    fail "against itself: no line '$pair' in $(cat "$out/self.out")"
done
"$kvl" ppl $common --config "$out/snapkv.yaml" > "$out/ppl.out" 2> "$out/ppl.err" ||
  fail "ppl exited with $?"
"$kvl" compare $common --config "$out/snapkv.yaml" > "$out/snapkv.out" 2> "$out/snapkv.err" ||
  fail "compare with snapkv exited with $?"
compare_ppl=$(value "$out/snapkv.out" config.ppl) ppl=$(value "$out/ppl.out" ppl)
[ "$compare_ppl" = "$ppl" ] || fail "compare's config.ppl $compare_ppl is not ppl's $ppl"
holds "$(value "$out/snapkv.out" kl)" '>' 0 || fail "snapkv against the full cache: KL is not > 0"

"$kvl" compare $common --config "$out/bf16.yaml" --baseline-config "$out/f32.yaml" \
  > "$out/bf16.out" 2> "$out/bf16.err" || fail "compare bf16 exited with $?"
holds "$(value "$out/bf16.out" kl)" '>' 0 || fail "bf16 against f32: KL is not > 0"
holds "$(value "$out/bf16.out" kl_se)" '>' 0 || fail "bf16 against f32: no standard error"

# A bad baseline: exit 1, the option and the file's line in the message.
if "$kvl" compare $common --config "$out/f32.yaml" --baseline-config "$out/bad.yaml" \
     > "$out/bad.out" 2> "$out/bad.err"; then
  fail "a bad --baseline-config was accepted"
else
  rc=$?
  [ $rc -eq 1 ] || fail "a bad --baseline-config exited with $rc, not 1"
  grep -q -- "--baseline-config.*bad.yaml:1: cache.dtype" "$out/bad.err" ||
    fail "the error does not name --baseline-config and the file's line: $(cat "$out/bad.err")"
fi
if "$kvl" compare $common --config "$out/f32.yaml" --prompt 8 > /dev/null 2>&1; then
  fail "--prompt without --generate was accepted"
fi

if [ $# -ge 7 ] && [ -f "$6" ] && [ -f "$7" ]; then
  printf 'cache: { dtype: f16 }\n' > "$out/f16.yaml"
  printf 'cache: { dtype: q4_0 }\n' > "$out/q4_0.yaml"
  "$kvl" compare --model "$6" --token-ids "$7" --window 64 --tokens 126 --generate 16 \
    --config "$out/q4_0.yaml" --baseline-config "$out/f16.yaml" \
    > "$out/q4_0.out" 2> "$out/q4_0.err" ||
    fail "compare q4_0 on $6 exited with $?"
  holds "$(value "$out/q4_0.out" kl)" '>' 0 || fail "q4_0 against f16: KL is not > 0"
  holds "$(value "$out/q4_0.out" top1_agreement)" '<' 1 ||
    fail "q4_0 against f16: top-1 agreement 1"
else
  echo "SmolLM2-135M not found: the q4_0 case did not run"
fi
[ $status -eq 0 ] && echo "compare: all checks passed"
exit $status
