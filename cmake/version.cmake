# PSRT_VERSION_FULL: the one version of this build, printed by `psrun --version` (and the other
# tools), carried by `psrt.__version__`, the .deb and the wheel. From `git describe` when the
# source is a git checkout: a tag vX.Y.Z on HEAD gives X.Y.Z; commits after it give
# X.Y.Z+<n>.g<hash>; without a tag, the project's VERSION with +git<commit count>.g<hash>;
# uncommitted changes add .dirty. Outside git (a source tarball), PSRT_VERSION_OVERRIDE or the
# project's VERSION. It is computed when CMake configures, which `make build` and `make package`
# do every time; it lands in <build>/generated/psrt/version.h, which only the tools and the
# Python module include, so a new commit rebuilds those few files.
# setup.py runs this file as a script (cmake -P) to learn the version before building.
if(CMAKE_SCRIPT_MODE_FILE)
  get_filename_component(PROJECT_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
  file(STRINGS "${PROJECT_SOURCE_DIR}/CMakeLists.txt" _project REGEX "^project\\(psrt VERSION ")
  string(REGEX REPLACE ".*VERSION ([0-9.]+).*" "\\1" PROJECT_VERSION "${_project}")
  set(PSRT_VERSION_OVERRIDE "$ENV{PSRT_VERSION_OVERRIDE}")
else()
  set(PSRT_VERSION_OVERRIDE "" CACHE STRING "Use this version instead of git describe's")
endif()

function(psrt_git_version out)
  set(${out} "" PARENT_SCOPE)
  find_package(Git QUIET)
  if(NOT GIT_FOUND OR NOT EXISTS "${PROJECT_SOURCE_DIR}/.git")
    return()
  endif()
  macro(_git var)
    execute_process(COMMAND "${GIT_EXECUTABLE}" ${ARGN} WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                    OUTPUT_VARIABLE ${var} OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE _rc ERROR_QUIET)
    if(NOT _rc EQUAL 0)
      set(${var} "")
    endif()
  endmacro()
  _git(hash rev-parse --short=8 HEAD)
  if(hash STREQUAL "")
    return()
  endif()
  _git(described describe --tags --match "v[0-9]*" --long)
  if(described MATCHES "^v([0-9][0-9.]*)-([0-9]+)-g([0-9a-f]+)$")
    set(v "${CMAKE_MATCH_1}")
    if(NOT CMAKE_MATCH_2 EQUAL 0)
      string(APPEND v "+${CMAKE_MATCH_2}.g${CMAKE_MATCH_3}")
    endif()
  else()
    _git(count rev-list --count HEAD)
    set(v "${PROJECT_VERSION}+git${count}.g${hash}")
  endif()
  _git(dirty status --porcelain --untracked-files=no)
  if(NOT dirty STREQUAL "")
    if(v MATCHES "\\+")
      string(APPEND v ".dirty")
    else()
      string(APPEND v "+dirty")
    endif()
  endif()
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

if(PSRT_VERSION_OVERRIDE)
  set(PSRT_VERSION_FULL "${PSRT_VERSION_OVERRIDE}")
else()
  psrt_git_version(PSRT_VERSION_FULL)
  if(PSRT_VERSION_FULL STREQUAL "")
    set(PSRT_VERSION_FULL "${PROJECT_VERSION}")
  endif()
endif()
message(STATUS "psrt version ${PSRT_VERSION_FULL}")
if(CMAKE_SCRIPT_MODE_FILE)
  return()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in
               ${PROJECT_BINARY_DIR}/generated/psrt/version.h @ONLY)
