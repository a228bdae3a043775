# git_commit.cmake — run by the build every time (cmake -P, see CMakeLists.txt): writes OUT, a C
# file defining mpx_git_commit() as the commit the sources are at: 12 hex digits, "+dirty" when
# tracked files differ from it, "unknown" outside a git checkout. OUT is rewritten only when
# that changes, so a build recompiles one small file at most, and run files and bench JSON never
# carry the commit of an older configure.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY "${SRC}"
    RESULT_VARIABLE dirty ERROR_QUIET)
  if(NOT dirty EQUAL 0)
    set(commit "${commit}+dirty")
  endif()
endif()
set(text "/* Generated at build time by cmake/git_commit.cmake; do not edit. */\n#include \"mpx/runtime.h\"\n\nconst char *mpx_git_commit(void) { return \"${commit}\"; }\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
