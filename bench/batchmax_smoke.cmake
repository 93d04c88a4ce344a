# kvc.bench_batchmax_*: runs `kvc-bench batchmax` on a real model (every mode, f32 K/V) and
# checks that it completes with a batch, a peak and an NLL per mode, and that the full-cache
# mode's mean continuation NLL is what `kvc-llama ppl` gives for the same tokens: a request's
# continuation NLL is ppl's sum over its whole window less ppl's sum over its prompt.
# With -DQUANTIZED=<format> per_chunk also runs with K/V in that format, whose continuation
# NLL must be within 0.01 nats of per_chunk's in f32. With -DDEMOTE=<format> the
# per_chunk_demote mode (per_chunk demoting to that format) runs too and must report its
# batch, peak, speed and NLL.
#
#   cmake -DBENCH=<kvc-bench> -DKVL=<kvc-llama> -DMODEL=<file> [-DTOKENIZER=<file>]
#         (-DTEXT=<file> | -DIDS=<file>) -DREQUESTS=N -DPROMPT=N -DNEW=N -DCHUNK=N -DBUDGET=N
#         [-DQUANTIZED=<format>] [-DDEMOTE=<format>] -DOUT_DIR=<dir> -P batchmax_smoke.cmake
#
# With IDS (whitespace-separated token ids) both read the ids and any number of requests is
# checked; with TEXT both encode it and REQUESTS must be 1 (ppl's windows cannot start where
# a later request does). The test runs it through tests/llama/run_if_present.sh, which skips
# it when the shared files are absent.
cmake_minimum_required(VERSION 3.25)

function(fail what)
  message(FATAL_ERROR "batchmax_smoke: ${what}")
endfunction()

foreach(var BENCH KVL MODEL REQUESTS PROMPT NEW CHUNK BUDGET OUT_DIR)
  if(NOT DEFINED ${var})
    fail("-D${var}=... is required")
  endif()
endforeach()
if((DEFINED IDS AND DEFINED TEXT) OR (NOT DEFINED IDS AND NOT DEFINED TEXT))
  fail("give exactly one of -DIDS and -DTEXT")
endif()
if(DEFINED TEXT AND NOT REQUESTS EQUAL 1)
  fail("-DTEXT checks one request only; use -DIDS for more")
endif()

file(REMOVE_RECURSE "${OUT_DIR}")
file(MAKE_DIRECTORY "${OUT_DIR}")

# Runs a program; its stdout lands in the variable named by `out`.
function(run out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    fail("`${ARGN}` exited with ${rc}\nstdout:\n${stdout}\nstderr:\n${stderr}")
  endif()
  set(${out} "${stdout}" PARENT_SCOPE)
endfunction()

# The decimal number of the line `name=value` in `text`, as an integer in millionths.
function(micro_of out text name)
  if(NOT text MATCHES "(^|\n)${name}=([0-9]+)(\\.([0-9]*))?\n")
    fail("no line '${name}=<decimal number>' in the output:\n${text}")
  endif()
  set(fraction "${CMAKE_MATCH_4}000000")
  string(SUBSTRING "${fraction}" 0 6 fraction)
  string(REGEX REPLACE "^0+([0-9])" "\\1" whole "${CMAKE_MATCH_2}")
  string(REGEX REPLACE "^0+([0-9])" "\\1" fraction "${fraction}")
  math(EXPR micro "${whole} * 1000000 + ${fraction}")
  set(${out} "${micro}" PARENT_SCOPE)
endfunction()

set(tokenizer_args "")
if(DEFINED TOKENIZER)
  set(tokenizer_args "--tokenizer=${TOKENIZER}")
endif()
if(DEFINED IDS)
  set(input_arg "--token_ids=${IDS}")
else()
  set(input_arg "--text=${TEXT}")
endif()
set(formats_arg "--formats=f32")
if(DEFINED QUANTIZED)
  set(formats_arg "--formats=f32,${QUANTIZED}")
endif()
set(demote_args "")
set(modes full once once_layerwise per_chunk)
if(DEFINED DEMOTE)
  set(demote_args "--demote=${DEMOTE}")
  list(APPEND modes per_chunk_demote)
endif()
run(bench_out "${BENCH}" batchmax "--model=${MODEL}" ${tokenizer_args} "${input_arg}"
    --requests=${REQUESTS} --prompt_tokens=${PROMPT} --new_tokens=${NEW} --chunk_tokens=${CHUNK}
    --budget=${BUDGET} ${formats_arg} ${demote_args} --progress=0
    "--csv=${OUT_DIR}/batchmax.csv" "--png=${OUT_DIR}/batchmax.png")

foreach(mode IN LISTS modes)
  foreach(figure IN ITEMS max_batch peak_bytes decode_tokens_per_s)
    if(NOT bench_out MATCHES "\nbatchmax_${mode}_${figure}=[0-9]")
      fail("no batchmax_${mode}_${figure} line:\n${bench_out}")
    endif()
  endforeach()
  micro_of(nll_${mode} "${bench_out}" "batchmax_${mode}_nll")
endforeach()
foreach(line IN ITEMS "batchmax_batch_ratio" "batchmax_throughput_ratio")
  if(NOT bench_out MATCHES "\n${line}=[0-9]")
    fail("no ${line} line:\n${bench_out}")
  endif()
endforeach()
if(NOT bench_out MATCHES "\nbatchmax_prompt_tokens=${PROMPT}\n")
  fail("batchmax did not run the ${PROMPT}-token prompts asked for:\n${bench_out}")
endif()
set(quantized_note "")
if(DEFINED QUANTIZED)
  set(row "per_chunk_${QUANTIZED}")
  set(formats_lines "batchmax_${row}_k_format=${QUANTIZED}\nbatchmax_${row}_v_format=${QUANTIZED}")
  if(NOT bench_out MATCHES "\n${formats_lines}\n")
    fail("no ${row} row with K and V in ${QUANTIZED}:\n${bench_out}")
  endif()
  micro_of(nll_quantized "${bench_out}" "batchmax_${row}_nll")
  math(EXPR quantized_diff "${nll_quantized} - ${nll_per_chunk}")
  if(quantized_diff LESS 0)
    math(EXPR quantized_diff "-(${quantized_diff})")
  endif()
  if(quantized_diff GREATER 10000)
    fail("per_chunk's continuation NLL is ${nll_quantized}e-6 with K/V in ${QUANTIZED}, "
         "${nll_per_chunk}e-6 in f32: more than 0.01 nats apart")
  endif()
  set(quantized_note "; per_chunk ${QUANTIZED} ${nll_quantized}e-6")
endif()

# A prompt is BOS + PROMPT - 1 text tokens when the model has that convention, else PROMPT
# text tokens; `kvc-llama ppl --window PROMPT + NEW` then consumes exactly one request's
# window of text tokens and scores PROMPT + NEW - 1 of them, the last NEW being the
# continuation's.
if(bench_out MATCHES "each prompt after BOS")
  set(bos 1)
elseif(bench_out MATCHES "no BOS")
  set(bos 0)
else()
  fail("the prompts line names no BOS convention:\n${bench_out}")
endif()
math(EXPR window "${PROMPT} + ${NEW}")
math(EXPR text_window "${window} - ${bos}")
math(EXPR prompt_text "${PROMPT} - ${bos}")
math(EXPR scored_window "${REQUESTS} * (${window} - 1)")
math(EXPR scored_prompt "${REQUESTS} * (${PROMPT} - 1)")

if(DEFINED IDS)
  # The requests' prompts alone, one after the other, for ppl windows of PROMPT positions.
  math(EXPR needed "${REQUESTS} * ${text_window}")
  math(EXPR read_bytes "${needed} * 12 + 4096")
  file(READ "${IDS}" ids_text LIMIT ${read_bytes})
  string(REGEX MATCHALL "[0-9]+" ids "${ids_text}")
  list(LENGTH ids n_ids)
  if(n_ids LESS needed)
    fail("${IDS}: fewer than ${needed} ids in its first ${read_bytes} bytes")
  endif()
  set(prompt_ids "")
  math(EXPR last "${REQUESTS} - 1")
  foreach(r RANGE ${last})
    math(EXPR begin "${r} * ${text_window}")
    list(SUBLIST ids ${begin} ${prompt_text} prompt)
    list(APPEND prompt_ids ${prompt})
  endforeach()
  list(JOIN prompt_ids " " prompt_ids)
  file(WRITE "${OUT_DIR}/prompts.ids" "${prompt_ids}\n")
  set(window_input --token-ids "${IDS}")
  set(prompt_input --token-ids "${OUT_DIR}/prompts.ids" --window ${PROMPT})
else()
  set(window_input --text "${TEXT}")
  set(prompt_input --text "${TEXT}" --window ${window})
endif()
set(tokenizer_args "")
if(DEFINED TOKENIZER)
  set(tokenizer_args --tokenizer "${TOKENIZER}")
endif()
run(ppl_window "${KVL}" ppl --model "${MODEL}" ${tokenizer_args} ${window_input}
    --window ${window} --tokens ${scored_window})
run(ppl_prompt "${KVL}" ppl --model "${MODEL}" ${tokenizer_args} ${prompt_input}
    --tokens ${scored_prompt})
foreach(pair IN ITEMS "ppl_window;${scored_window}" "ppl_prompt;${scored_prompt}")
  list(GET pair 0 out)
  list(GET pair 1 scored)
  if(NOT ${out} MATCHES "\nscored_tokens=${scored}\n")
    fail("`kvc-llama ppl` did not score ${scored} tokens:\n${${out}}")
  endif()
endforeach()
micro_of(window_nll "${ppl_window}" "nll")
micro_of(prompt_nll "${ppl_prompt}" "nll")

# Mean continuation NLL in millionths; tolerance 1e-3 nats (chunked, batched f32 prefill and
# decode steps against ppl's one-chunk windows: only the order of the sums differs).
math(EXPR expected
     "(${window_nll} * ${scored_window} - ${prompt_nll} * ${scored_prompt}) / (${REQUESTS} * ${NEW})")
math(EXPR diff "${nll_full} - ${expected}")
if(diff LESS 0)
  math(EXPR diff "-(${diff})")
endif()
if(diff GREATER 1000)
  fail("full-cache NLL ${nll_full}e-6 but `kvc-llama ppl` gives ${expected}e-6 for the same "
       "continuations (difference ${diff}e-6 > 1000e-6)")
endif()
message("batchmax_smoke: full-cache continuation NLL ${nll_full}e-6, kvc-llama ppl "
        "${expected}e-6 (difference ${diff}e-6); once ${nll_once}e-6, once_layerwise "
        "${nll_once_layerwise}e-6, per_chunk ${nll_per_chunk}e-6${quantized_note}")
