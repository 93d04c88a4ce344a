# kvc.llama_eval_smoke: runs `kvc-llama eval` on stories260K with a tiny setting (1 window,
# the policies full and snapkv, one budget) and checks its output format, that the full cache
# and the `full` policy give what `kvc-llama ppl` gives, that snapkv holds its budget, and that
# bad --dtype, --full-dtype, --demote, --demote-keep and --skip values are refused.
#
#   cmake -DKVL=<kvc-llama> -DMODEL_DIR=<dir> -DDATA_DIR=<dir> -DOUT_DIR=<dir> -P eval_smoke.cmake
#
# The test runs it through run_if_present.sh, which skips it when the shared files are absent.
cmake_minimum_required(VERSION 3.25)

foreach(var KVL MODEL_DIR DATA_DIR OUT_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "eval_smoke.cmake: -D${var}=... is required")
  endif()
endforeach()

set(model "${MODEL_DIR}/stories260K.bin")
set(tokenizer "${MODEL_DIR}/tok512.bin")
set(text "${DATA_DIR}/tom_sawyer.txt")

file(REMOVE_RECURSE "${OUT_DIR}")
file(MAKE_DIRECTORY "${OUT_DIR}")

function(fail what)
  message(FATAL_ERROR "kvc.llama_eval_smoke: ${what}")
endfunction()

# Runs kvc-llama with the given arguments; its stdout lands in the variable named by `out`.
function(run_kvl out)
  execute_process(COMMAND "${KVL}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    fail("`kvc-llama ${ARGN}` exited with ${rc}\nstdout:\n${stdout}\nstderr:\n${stderr}")
  endif()
  set(${out} "${stdout}" PARENT_SCOPE)
endfunction()

# The value of the line `name=value` in `text`, which must be a positive decimal number.
function(value_of out text name)
  string(REPLACE "." "\\." pattern "${name}")
  if(NOT text MATCHES "(^|\n)${pattern}=([0-9]+\\.[0-9]+)\n")
    fail("no line '${name}=<number>' in the output:\n${text}")
  endif()
  set(${out} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

run_kvl(eval_out eval --model "${model}" --tokenizer "${tokenizer}" --text "${text}"
        --windows 1 --policies full,snapkv --budgets 0.25
        --csv "${OUT_DIR}/eval.csv" --markdown "${OUT_DIR}/eval.md")

# The text tables: both headers and a row per policy (plus the full cache) in each.
foreach(pattern IN ITEMS
        "^storage: K/V f32, no demotion; windows from text token 0\n"
        "\\(a\\) perplexity, decoding one token at a time: 1 window x 511 scored tokens"
        "\\(b\\) continuation NLL \\(nats\\) of the last 64 tokens"
        "\npolicy +25% \\(128\\)\n"
        "\npolicy +25% \\(112\\)"
        "\n +per_chunk +once\n")
  if(NOT eval_out MATCHES "${pattern}")
    fail("the output lacks '${pattern}':\n${eval_out}")
  endif()
endforeach()
foreach(row IN ITEMS "full cache" "full" "snapkv")
  string(REGEX MATCHALL "\n${row} +[0-9]+\\.[0-9]+( +[0-9]+\\.[0-9]+)?\n" rows "${eval_out}")
  list(LENGTH rows n)
  if(NOT n EQUAL 2)
    fail("expected a '${row}' row in both tables, found ${n}:\n${eval_out}")
  endif()
endforeach()

# name=value lines.
foreach(pair IN ITEMS "windows=1" "window_positions=512" "scored_tokens=511" "prompt_tokens=448"
        "continuation_tokens=64" "chunk=64" "skip=0" "dtype=f32" "full_dtype=f32"
        "demote=none")
  if(NOT eval_out MATCHES "(^|\n)${pair}\n")
    fail("the output lacks the line '${pair}':\n${eval_out}")
  endif()
endforeach()
value_of(full_ppl "${eval_out}" "full_cache.ppl")
value_of(full_nll "${eval_out}" "full_cache.nll")
value_of(full_cont "${eval_out}" "full_cache.cont_nll")
foreach(policy IN ITEMS full snapkv)
  foreach(metric IN ITEMS ppl nll cont_nll.per_chunk cont_nll.once)
    value_of(p_${policy}_${metric} "${eval_out}" "${policy}.r0.25.${metric}")
  endforeach()
endforeach()
value_of(seconds "${eval_out}" "seconds")

# The `full` policy never evicts: its numbers are the full cache's.
foreach(pair IN ITEMS "full_ppl;p_full_ppl" "full_nll;p_full_nll"
        "full_cont;p_full_cont_nll.per_chunk" "full_cont;p_full_cont_nll.once")
  list(GET pair 0 a)
  list(GET pair 1 b)
  if(NOT "${${a}}" STREQUAL "${${b}}")
    fail("policy full differs from the full cache: ${a}=${${a}} but ${b}=${${b}}")
  endif()
endforeach()

# The full cache's perplexity is `kvc-llama ppl`'s over the same 511 tokens: exactly (as
# printed) with one token per step, the same procedure; within 1e-4 relative in one chunk.
run_kvl(ppl1_out ppl --model "${model}" --tokenizer "${tokenizer}" --text "${text}"
        --tokens 511 --chunk 1)
if(NOT ppl1_out MATCHES "^perplexity ([0-9]+\\.[0-9]+) \\(mean NLL [0-9.]+ nats\\) over 511 tokens")
  fail("unexpected `kvc-llama ppl` output:\n${ppl1_out}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL full_ppl)
  fail("full-cache perplexity ${full_ppl} but `kvc-llama ppl --chunk 1` gives ${CMAKE_MATCH_1}")
endif()
run_kvl(ppl_out ppl --model "${model}" --tokenizer "${tokenizer}" --text "${text}" --tokens 511)
if(NOT ppl_out MATCHES "^perplexity ([0-9]+\\.[0-9]+) ")
  fail("unexpected `kvc-llama ppl` output:\n${ppl_out}")
endif()
string(REPLACE "." "" a "${full_ppl}") # 4 decimals each: fixed-point integers
string(REPLACE "." "" b "${CMAKE_MATCH_1}")
math(EXPR diff "${a} - ${b}")
if(diff LESS 0)
  math(EXPR diff "-(${diff})")
endif()
math(EXPR scaled "${diff} * 10000")
if(scaled GREATER a)
  fail("full-cache perplexity ${full_ppl} but `kvc-llama ppl` gives ${CMAKE_MATCH_1}")
endif()

# snapkv evicts: a different perplexity, and each head ends holding exactly its budget.
if(p_snapkv_ppl STREQUAL full_ppl)
  fail("snapkv at 25% gives the full cache's perplexity ${full_ppl}: nothing was evicted?")
endif()

# CSV: the header, the full cache and one row per (policy, budget).
file(STRINGS "${OUT_DIR}/eval.csv" csv)
list(LENGTH csv n)
if(NOT n EQUAL 4)
  fail("eval.csv has ${n} lines, expected 4")
endif()
list(GET csv 0 header)
set(expected_header "policy,budget_ratio,decode_budget,sinks,recent,ppl,nll,held_decode,prompt_budget,prompt_sinks,prompt_recent,cont_nll_per_chunk,cont_nll_once,held_per_chunk,held_once,held_bytes_decode,held_bytes_per_chunk,held_bytes_once,dtype,demote,demote_keep")
if(NOT header STREQUAL expected_header)
  fail("eval.csv header is\n  ${header}\nexpected\n  ${expected_header}")
endif()
list(GET csv 1 row)
if(NOT row MATCHES "^full_cache,1,0,-1,-1,[0-9.]+,[0-9.]+,511\\.00,0,-1,-1,")
  fail("eval.csv full-cache row: ${row}")
endif()
list(GET csv 3 row)
# snapkv: budget 128 (25% of 512), recent 32 (its window), 128 held after decoding; budget 112
# for the prompt (25% of 448), 112 + 63 held after the continuation; their bytes (f32); no
# demotion.
if(NOT row MATCHES "^snapkv,0\\.25,128,0,32,[0-9.]+,[0-9.]+,128\\.00,112,0,32,[0-9.]+,[0-9.]+,175\\.00,175\\.00,[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*,f32,none,-1$")
  fail("eval.csv snapkv row: ${row}")
endif()

# Markdown: both tables with their rows.
file(READ "${OUT_DIR}/eval.md" md)
foreach(pattern IN ITEMS "^Storage: K/V f32, no demotion; windows from text token 0\\.\n"
        "\n\\| policy \\| 25% \\(128\\) \\|\n\\|---\\|---:\\|\n"
        "\n\\| policy \\| 25% \\(112\\) per_chunk \\| 25% once \\|\n\\|---\\|---:\\|---:\\|\n"
        "\n\\| full cache \\| [0-9.]+ \\|\n" "\n\\| snapkv \\| [0-9.]+ \\| [0-9.]+ \\|\n")
  if(NOT md MATCHES "${pattern}")
    fail("eval.md lacks '${pattern}':\n${md}")
  endif()
endforeach()

# The storage and text options: a bad value is a usage error (exit 2) naming the option; a
# --skip that leaves too little text is a failure (exit 1) saying how many tokens it needs.
function(expect_exit code pattern)
  execute_process(COMMAND "${KVL}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL code)
    fail("`kvc-llama ${ARGN}` exited with ${rc}, expected ${code}\nstderr:\n${stderr}")
  endif()
  if(NOT stderr MATCHES "${pattern}")
    fail("`kvc-llama ${ARGN}`: stderr lacks '${pattern}':\n${stderr}")
  endif()
endfunction()
set(args --model "${model}" --tokenizer "${tokenizer}" --text "${text}" --windows 1)
expect_exit(2 "--dtype expects f32, f16, bf16, q8_0 or q4_0, got 'f64'" eval ${args} --dtype f64)
expect_exit(2 "--full-dtype expects f32, f16, bf16, q8_0 or q4_0, got 'f8'"
            eval ${args} --full-dtype f8)
expect_exit(2 "--demote expects f32, f16, bf16, q8_0 or q4_0, got 'q3'" eval ${args} --demote q3)
expect_exit(2 "--demote-keep needs --demote" eval ${args} --demote-keep 0.5)
expect_exit(2 "--demote-keep expects a number in \\[0, 1\\], got '1.5'"
            eval ${args} --demote q4_0 --demote-keep 1.5)
expect_exit(2 "--skip expects an integer" eval ${args} --skip -1)
expect_exit(2 "--demote expects f32, f16, bf16, q8_0 or q4_0, got 'q3'"
            eval --retrieval --model "${model}" --demote q3)
expect_exit(1 "--skip 1000000 and 1 window of 511 text tokens need 1000511"
            eval ${args} --skip 1000000)

message("kvc.llama_eval_smoke: full cache ppl ${full_ppl} (= kvc-llama ppl), continuation NLL "
        "${full_cont}; snapkv 25%: ppl ${p_snapkv_ppl}, continuation NLL per_chunk "
        "${p_snapkv_cont_nll.per_chunk}, once ${p_snapkv_cont_nll.once}; ${seconds} s")
