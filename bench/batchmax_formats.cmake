# kvc.bench_batchmax_formats: `kvc-bench batchmax` on a small random-weight model whose K/V
# weighs more than its activations, full and per_chunk in f16, per_chunk also in q8_0 and
# q8_0/q4_0 (the default --formats) under one limit. Checks that each per_chunk row names its
# K and V formats, stays under the limit, and that the smaller formats fit larger batches:
# q8_0 more than f16, q8_0/q4_0 at least q8_0's.
#
#   cmake -DBENCH=<kvc-bench> -DOUT_DIR=<dir> -P batchmax_formats.cmake
cmake_minimum_required(VERSION 3.25)

function(fail what)
  message(FATAL_ERROR "batchmax_formats: ${what}")
endfunction()

foreach(var BENCH OUT_DIR)
  if(NOT DEFINED ${var})
    fail("-D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${OUT_DIR}")
file(MAKE_DIRECTORY "${OUT_DIR}")

execute_process(
  COMMAND "${BENCH}" batchmax --dim=64 --heads=2 --layers=8 --hidden_dim=64 --vocab=256
          --prompt_tokens=256 --new_tokens=8 --chunk_tokens=32 --budget=64 --requests=16
          --modes=full,per_chunk --progress=0 "--csv=${OUT_DIR}/batchmax.csv"
          "--png=${OUT_DIR}/batchmax.png"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("kvc-bench batchmax exited with ${rc}\nstdout:\n${out}\nstderr:\n${err}")
endif()

# The integer of the line `name=value`.
function(value_of var name)
  if(NOT out MATCHES "\n${name}=([0-9]+)\n")
    fail("no line '${name}=<integer>' in the output:\n${out}")
  endif()
  set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

value_of(limit batchmax_memory_limit_bytes)
foreach(row_formats IN ITEMS "per_chunk;f16;f16" "per_chunk_q8_0;q8_0;q8_0"
                             "per_chunk_q8_0_q4_0;q8_0;q4_0")
  list(GET row_formats 0 row)
  list(GET row_formats 1 k)
  list(GET row_formats 2 v)
  if(NOT out MATCHES "\nbatchmax_${row}_k_format=${k}\nbatchmax_${row}_v_format=${v}\n")
    fail("the ${row} row does not name K ${k} and V ${v}:\n${out}")
  endif()
  value_of(batch_${row} batchmax_${row}_max_batch)
  value_of(peak_${row} batchmax_${row}_peak_bytes)
  if(peak_${row} GREATER limit)
    fail("${row}: peak ${peak_${row}} bytes over the limit of ${limit}")
  endif()
endforeach()
if(NOT batch_per_chunk_q8_0 GREATER batch_per_chunk)
  fail("per_chunk q8_0 fits ${batch_per_chunk_q8_0} sequences, f16 ${batch_per_chunk}: "
       "half the K/V bytes should fit more under the same limit")
endif()
if(batch_per_chunk_q8_0_q4_0 LESS batch_per_chunk_q8_0)
  fail("per_chunk q8_0/q4_0 fits ${batch_per_chunk_q8_0_q4_0} sequences, fewer than q8_0's "
       "${batch_per_chunk_q8_0}")
endif()
message("batchmax_formats: limit ${limit} bytes; per_chunk batch f16 ${batch_per_chunk}, "
        "q8_0 ${batch_per_chunk_q8_0}, q8_0/q4_0 ${batch_per_chunk_q8_0_q4_0}")

# A format name outside the table is refused, naming it.
execute_process(COMMAND "${BENCH}" batchmax --formats=f16,q8_0/q5_1 --progress=0
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--formats: expected one of [^\n]*, got 'q5_1'")
  fail("--formats=f16,q8_0/q5_1 was not refused (exit status ${rc}) with a message naming "
       "q5_1:\n${err}")
endif()
