# The installed public headers stand alone (cmake -P; run by install_check.sh): every
# header in KVSTASH_INCLUDE_DIR/kvstash/ (the include/ folder of an installed client)
#   1. includes only standard library headers (<name>, no path) and other kvstash/
#      headers that are installed beside it;
#   2. compiles as the only include of a translation unit with the project's compiler,
#      C++20 and -I KVSTASH_INCLUDE_DIR alone.
# Any other include (a model/, codec/, server/ or protocol/ header, Boost, ...) fails
# the check, as does a header that compiles only after something else.
#
# Variables: KVSTASH_INCLUDE_DIR, KVSTASH_CXX (compiler), KVSTASH_WORK_DIR (scratch).
cmake_minimum_required(VERSION 3.25)
foreach(v KVSTASH_INCLUDE_DIR KVSTASH_CXX KVSTASH_WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "public_headers_check.cmake: ${v} is not set")
  endif()
endforeach()
file(GLOB headers RELATIVE "${KVSTASH_INCLUDE_DIR}" "${KVSTASH_INCLUDE_DIR}/kvstash/*.h")
if(NOT headers)
  message(FATAL_ERROR "no headers under ${KVSTASH_INCLUDE_DIR}/kvstash")
endif()
file(MAKE_DIRECTORY "${KVSTASH_WORK_DIR}")

set(failures "")
foreach(h ${headers})
  file(STRINGS "${KVSTASH_INCLUDE_DIR}/${h}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]*)>")
      set(inc "${CMAKE_MATCH_1}")
      if(NOT inc MATCHES "^[a-z_]+$")
        string(APPEND failures "${h}: includes <${inc}> (not a standard library header)\n")
      endif()
    elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\"")
      set(inc "${CMAKE_MATCH_1}")
      if(NOT inc MATCHES "^kvstash/" OR NOT EXISTS "${KVSTASH_INCLUDE_DIR}/${inc}")
        string(APPEND failures "${h}: includes \"${inc}\" (not an installed kvstash/ header)\n")
      endif()
    else()
      string(APPEND failures "${h}: unparsed include line: ${line}\n")
    endif()
  endforeach()

  string(MAKE_C_IDENTIFIER "${h}" tu_name)
  set(tu "${KVSTASH_WORK_DIR}/${tu_name}.cc")
  file(WRITE "${tu}" "#include \"${h}\"\n")
  execute_process(COMMAND "${KVSTASH_CXX}" -std=c++20 -fsyntax-only -I "${KVSTASH_INCLUDE_DIR}" "${tu}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(APPEND failures "${h}: does not compile alone:\n${out}\n")
  else()
    message(STATUS "${h}: compiles alone")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "the installed include/kvstash/ does not stand alone:\n${failures}")
endif()
