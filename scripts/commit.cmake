# commit.cmake: writes OUT, a header naming the source tree's commit
# (FUSION_COMMIT), for `fusionc --version`.  Run at every build (the
# fusion_commit target), it rewrites OUT only when the commit changed, so
# nothing recompiles otherwise.  "+changes": tracked files differ from it.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown (not built from a git checkout)")
elseif(NOT changes STREQUAL "")
  set(commit "${commit}+changes")
endif()
file(WRITE "${OUT}.tmp" "#define FUSION_COMMIT \"${commit}\"\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
