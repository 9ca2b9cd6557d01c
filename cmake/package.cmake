# `make package`: the Debian packages psrt_<version>_amd64.deb (the programs, the Python module,
# man pages, perf scripts, docs) and psrt-dev_<version>_amd64.deb (headers, the static libraries
# and the CMake package config for find_package(psrt)), built by CPack's DEB generator from the
# install rules (cmake/install.cmake, python/CMakeLists.txt and below). The split keeps the -dev
# libraries a C++ consumer needs (LibTorch's headers, UCX's, ...) off machines that only run jobs.
#
# PSRT_PACKAGE=ON (the Makefile's package target sets it) adds the man pages, generated from each
# program's --help and --version by help2man, and installs the Python module where Debian's python3
# looks (lib/python3/dist-packages). Depends: what dpkg-shlibdeps finds the programs and the module
# link, plus the interpreter and python3-torch the module imports.
option(PSRT_PACKAGE "Build for `make package`: man pages (help2man), Debian's Python layout" OFF)

set(PSRT_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/psrt)
install(FILES README.md CONTRIBUTING.md DESTINATION ${PSRT_DOC_DIR} COMPONENT runtime)
install(DIRECTORY docs/ DESTINATION ${PSRT_DOC_DIR}/docs COMPONENT runtime)
# The perf scripts (benchmarks, plots) with their runbook and results; each takes the directory
# of the programs (/usr/bin for the package) as its BIN argument.
install(PROGRAMS perf/plot_suite perf/plot_training perf/kernel_vs_pytorch.py
                 perf/transport_vs_perftest.py perf/pushpull_keys.sh perf/pushpull_matrix.sh
                 perf/replica_bench.sh perf/scaling_netns.sh perf/secure_matrix.sh
                 perf/training_matrix.sh
        DESTINATION ${CMAKE_INSTALL_DATADIR}/psrt/perf COMPONENT runtime)
install(FILES perf/CLUSTER.md perf/RESULTS.md DESTINATION ${CMAKE_INSTALL_DATADIR}/psrt/perf
        COMPONENT runtime)

if(PSRT_PACKAGE)
  find_program(PSRT_HELP2MAN help2man)
  if(NOT PSRT_HELP2MAN)
    message(FATAL_ERROR "PSRT_PACKAGE=ON makes the man pages with help2man: apt-get install "
                        "help2man (scripts/install_deps.sh --dev)")
  endif()
  set(_pages)
  set(_programs "psrun\;launch a psrt parameter-server job" "psbench\;psrt benchmarks")
  if(PSRT_HAVE_TORCH)
    list(APPEND _programs "pstrain\;data-parallel training through psrt's parameter servers"
                          "pseval\;evaluate pstrain checkpoints")
  endif()
  foreach(entry IN LISTS _programs)
    list(GET entry 0 program)
    list(GET entry 1 summary)
    set(page ${CMAKE_BINARY_DIR}/man/${program}.1)
    add_custom_command(OUTPUT ${page}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${PSRT_HELP2MAN} --no-info --no-discard-stderr --name=${summary}
              --output=${page} $<TARGET_FILE:${program}>
      COMMAND gzip -9nf ${page}
      DEPENDS ${program} VERBATIM)
    list(APPEND _pages ${page}.gz)
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${_pages})
  install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME psrt)
set(CPACK_PACKAGE_VERSION ${PSRT_VERSION_FULL})
set(CPACK_PACKAGE_CONTACT "psrt developers <psrt@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "parameter-server runtime for distributed deep-learning training")
set(CPACK_PACKAGE_DESCRIPTION
    "psrt moves gradients and weights between the processes of a data-parallel training job over UCX or TCP: sharded servers aggregate and update, psrun launches the job locally, over ssh, mpirun or Slurm.")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://localhost/psrt")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME psrt)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME psrt-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
if(PSRT_HAVE_PYTHON)
  # The module's extension is built for this interpreter (python3.X) and imports torch.
  set(_py "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
  math(EXPR _py_next "${Python3_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS
      "python3 (>= ${_py}), python3 (<< ${Python3_VERSION_MAJOR}.${_py_next}), python3-torch, python3-numpy")
endif()
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "dataset-fashion-mnist")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS
    "slurm-client, openmpi-bin, openssh-client, ucx-utils, python3-matplotlib")
# What find_package(psrt) and linking its static libraries need (cmake/psrtConfig.cmake.in).
set(_dev_depends "psrt (= ${PSRT_VERSION_FULL}), libfmt-dev, libssl-dev, libhwloc-dev, libibverbs-dev, nlohmann-json3-dev")
if(PSRT_HAVE_UCX)
  string(APPEND _dev_depends ", libucx-dev")
endif()
if(PSRT_HAVE_TORCH)
  string(APPEND _dev_depends ", libtorch-dev")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dev_depends}")
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "cmake, g++")
# prerm removes the bytecode Python wrote next to the module, so that purging leaves nothing.
set(PSRT_PYTHON_PACKAGE_PATH "${CMAKE_INSTALL_PREFIX}/${PSRT_PYTHON_INSTALL_DIR}/psrt")
configure_file(cmake/debian/prerm.in ${CMAKE_BINARY_DIR}/debian/prerm @ONLY
               FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/debian/prerm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
