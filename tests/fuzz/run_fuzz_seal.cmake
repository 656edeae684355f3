# run_fuzz_seal.cmake: the fuzz_seal_30s test (cmake -P).
#
# The seeds must be sealed under fuzz_seal's own fixed keys (a forged frame
# never opens, so without them the paths past the tag go unfuzzed): the
# target writes them itself (FUSION_FUZZ_SEAL_SEEDS=DIR, then exits) into a
# fresh WORK_DIR/corpus, and is then run for SECONDS from there.  A crash,
# leak, timeout or sanitizer report fails the test; the reproducer is
# WORK_DIR/crash-* (or leak-*, timeout-*, oom-*): run `FUZZER REPRODUCER`.
#
#   cmake -DFUZZER=.../fuzz_seal -DWORK_DIR=... -DSECONDS=30 -P run_fuzz_seal.cmake
foreach(var FUZZER WORK_DIR SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz_seal.cmake: set -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus)
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env FUSION_FUZZ_SEAL_SEEDS=${WORK_DIR}/corpus ${FUZZER}
  RESULT_VARIABLE rc)
file(GLOB seeds ${WORK_DIR}/corpus/*)
list(LENGTH seeds n_seeds)
if(NOT rc EQUAL 0 OR n_seeds LESS 10)
  message(FATAL_ERROR "run_fuzz_seal.cmake: writing the seeds exited with ${rc} and left ${n_seeds} (expected 10 or more)")
endif()
message(STATUS "fuzzing for ${SECONDS} s from ${n_seeds} seeds in ${WORK_DIR}/corpus")

execute_process(
  COMMAND ${FUZZER}
    -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
    -artifact_prefix=${WORK_DIR}/
    ${WORK_DIR}/corpus
  WORKING_DIRECTORY ${WORK_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK_DIR}/crash-* ${WORK_DIR}/leak-* ${WORK_DIR}/timeout-* ${WORK_DIR}/oom-*)
  message(FATAL_ERROR "fuzz_seal exited with ${rc}; reproducer(s): ${found}\n"
                      "run again with: ${FUZZER} <reproducer>")
endif()
