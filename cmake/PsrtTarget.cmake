# Compiler warnings, set in one place for every target the project builds.
#
# PSRT_WERROR turns the warnings of host C++ code into errors: ON by default when the environment
# has CI=true (.ci/run exports it) and the build is not a sanitizer build, OFF otherwise, so that
# a newer compiler's new warning does not stop a user's build. Sanitizer builds (PSRT_SANITIZE,
# Debug) are left out of the default: GCC's flow warnings differ under instrumentation and -O0,
# and that build checks the tests, not the warnings; pass -DPSRT_WERROR=ON to have it anyway. CUDA code (.cu) keeps its own flags in kernels/CMakeLists.txt (nvcc's
# --Werror=all-warnings): nvcc passes host flags through -Xcompiler, and its own diagnostics are
# not GCC's.
if("$ENV{CI}" STREQUAL "true" AND NOT PSRT_SANITIZE)
  set(_psrt_werror_default ON)
else()
  set(_psrt_werror_default OFF)
endif()
option(PSRT_WERROR "Treat warnings in host C++ code as errors (default: ON when CI=true)"
       ${_psrt_werror_default})

# psrt_target_warnings(<target>): the project's warning flags on one target's C++ sources.
function(psrt_target_warnings target)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")
  # GCC 12 (Debian 12's) reports -Wrestrict inside libstdc++ for code as plain as
  # `"," + std::to_string(x)` (its operator+(const char*, std::string&&) inlined at -O2: GCC bug
  # 105651), and whether it fires depends on inlining, so a change elsewhere can make it appear.
  # The warning stays on for every other compiler.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>")
  endif()
  if(PSRT_WERROR)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
  endif()
endfunction()

# psrt_warnings_for_directory(<dir>): psrt_target_warnings on every library and executable
# defined in <dir> and the directories below it. The top-level CMakeLists.txt calls it once,
# after every add_subdirectory(), so no target states the flags itself.
function(psrt_warnings_for_directory dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      psrt_target_warnings(${target})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    psrt_warnings_for_directory("${subdir}")
  endforeach()
endfunction()
