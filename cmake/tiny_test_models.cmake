# The tiny random-weight test models tiny-{llama,qwen2,qwen3}-f32.gguf are not committed: configuring writes them
# with tests/data/make_tiny_models.py (Python 3 with NumPy) and checks each against the SHA-256 in
# tests/data/models/tiny-models.sha256. A file already there with the right digest is kept; a missing interpreter,
# a failed run or a wrong digest stops the configuration with the reason.

# KVSIEVE_NUMPY_PYTHON when given (-D), else the first of python3 on the PATH and /usr/bin/python3 that imports
# NumPy (cached).
function(kvsieve_numpy_python out)
  if(KVSIEVE_NUMPY_PYTHON)
    set(${out} ${KVSIEVE_NUMPY_PYTHON} PARENT_SCOPE)
    return()
  endif()
  find_program(KVSIEVE_PYTHON3_ON_PATH python3)
  foreach(candidate ${KVSIEVE_PYTHON3_ON_PATH} /usr/bin/python3)
    if(candidate AND EXISTS ${candidate})
      execute_process(COMMAND ${candidate} -c "import numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
      if(rc EQUAL 0)
        set(KVSIEVE_NUMPY_PYTHON ${candidate} CACHE FILEPATH "Python 3 with NumPy, which writes the tiny test models")
        set(${out} ${candidate} PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  message(FATAL_ERROR "The tiny test models (tests/data/make_tiny_models.py) need Python 3 with NumPy: none of "
                      "python3 on the PATH and /usr/bin/python3 imports numpy. Install Debian's python3-numpy "
                      "(scripts/install-deps.sh) or configure with -DKVSIEVE_NUMPY_PYTHON=PATH of an "
                      "interpreter that has it.")
endfunction()

# Writes the models missing from DIR, or whose digest is wrong, and checks all of them.
function(kvsieve_make_tiny_models dir)
  set(generator ${CMAKE_SOURCE_DIR}/tests/data/make_tiny_models.py)
  set(sums ${CMAKE_SOURCE_DIR}/tests/data/models/tiny-models.sha256)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${generator} ${sums} ${CMAKE_SOURCE_DIR}/tests/data/models/stories260K.gguf)
  file(STRINGS ${sums} lines)
  set(files)
  set(stale)
  foreach(line ${lines})
    if(NOT line MATCHES "^([0-9a-f]+)  ([A-Za-z0-9_.-]+)\\.gguf$")
      message(FATAL_ERROR "${sums}: cannot read the line '${line}' (expected: SHA-256, two spaces, NAME.gguf)")
    endif()
    set(want_${CMAKE_MATCH_2} ${CMAKE_MATCH_1})
    list(APPEND files ${CMAKE_MATCH_2})
    set(have "")
    if(EXISTS ${dir}/${CMAKE_MATCH_2}.gguf)
      file(SHA256 ${dir}/${CMAKE_MATCH_2}.gguf have)
    endif()
    if(NOT have STREQUAL CMAKE_MATCH_1)
      list(APPEND stale ${CMAKE_MATCH_2})
    endif()
  endforeach()
  if(NOT stale)
    return()
  endif()
  kvsieve_numpy_python(python)
  string(REPLACE ";" ", " list "${stale}")
  message(STATUS "Writing the tiny test models ${list} into ${dir}")
  execute_process(COMMAND ${python} ${generator} ${dir} ${stale} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tests/data/make_tiny_models.py (${python}) failed: ${err}")
  endif()
  foreach(name ${stale})
    file(SHA256 ${dir}/${name}.gguf have)
    if(NOT have STREQUAL want_${name})
      execute_process(COMMAND ${python} -c "import numpy; print(numpy.__version__)" OUTPUT_VARIABLE np
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      file(REMOVE ${dir}/${name}.gguf)
      message(FATAL_ERROR "tests/data/make_tiny_models.py wrote ${name}.gguf with SHA-256 ${have}, not "
                          "${want_${name}} (tests/data/models/tiny-models.sha256), with ${python} and NumPy ${np}: "
                          "the golden files describe the recorded bytes, so the tests cannot use this file.")
    endif()
  endforeach()
endfunction()
