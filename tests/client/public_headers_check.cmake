# The public headers of the client library stand alone (ctest public_headers_test;
# cmake -P with the variables below): every header in client/include/kvstash/
#   1. includes only standard library headers (<name>, no path), other kvstash/
#      headers, and the project headers of KVSTASH_ALLOWED_INCLUDES, by exact name;
#   2. compiles as the only include of a translation unit, with the project's compiler,
#      C++20, -I client/include (and -I the source root while the allowed list is not
#      empty).
# Any other include (a model/, codec/, server/ or protocol/ header, Boost, ...) fails
# the test, as does a header that compiles only after something else.
#
# Variables: KVSTASH_SOURCE_DIR (the source root), KVSTASH_CXX (compiler),
#   KVSTASH_WORK_DIR (scratch folder), KVSTASH_ALLOWED_INCLUDES (comma-separated;
#   today the common/ vocabulary the public API still names: Status/Result, keys, KV
#   chunks, codec ids).
cmake_minimum_required(VERSION 3.25)
foreach(v KVSTASH_SOURCE_DIR KVSTASH_CXX KVSTASH_WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "public_headers_check.cmake: ${v} is not set")
  endif()
endforeach()
string(REPLACE "," ";" KVSTASH_ALLOWED_INCLUDES "${KVSTASH_ALLOWED_INCLUDES}")
set(include_dir "${KVSTASH_SOURCE_DIR}/client/include")
file(GLOB headers RELATIVE "${include_dir}" "${include_dir}/kvstash/*.h")
if(NOT headers)
  message(FATAL_ERROR "no headers under ${include_dir}/kvstash")
endif()
file(MAKE_DIRECTORY "${KVSTASH_WORK_DIR}")
set(flags -std=c++20 -fsyntax-only -I "${include_dir}")
if(KVSTASH_ALLOWED_INCLUDES)
  list(APPEND flags -I "${KVSTASH_SOURCE_DIR}")
endif()

set(failures "")
foreach(h ${headers})
  file(STRINGS "${include_dir}/${h}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]*)>")
      set(inc "${CMAKE_MATCH_1}")
      if(NOT inc MATCHES "^[a-z_]+$")
        string(APPEND failures "${h}: includes <${inc}> (not a standard library header)\n")
      endif()
    elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\"")
      set(inc "${CMAKE_MATCH_1}")
      if(NOT inc MATCHES "^kvstash/" AND NOT inc IN_LIST KVSTASH_ALLOWED_INCLUDES)
        string(APPEND failures "${h}: includes \"${inc}\" (not a kvstash/ public header)\n")
      endif()
    else()
      string(APPEND failures "${h}: unparsed include line: ${line}\n")
    endif()
  endforeach()

  string(MAKE_C_IDENTIFIER "${h}" tu_name)
  set(tu "${KVSTASH_WORK_DIR}/${tu_name}.cc")
  file(WRITE "${tu}" "#include \"${h}\"\n")
  execute_process(COMMAND "${KVSTASH_CXX}" ${flags} "${tu}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(APPEND failures "${h}: does not compile alone:\n${out}\n")
  else()
    message(STATUS "${h}: compiles alone")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "client/include/kvstash/ does not stand alone:\n${failures}")
endif()
