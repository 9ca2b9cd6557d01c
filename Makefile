# The README's commands. Each one installs what is missing, configures and builds: the programs,
# library and module need the minimal packages (deps); the checks (test, test-sanitize, fuzz,
# tidy, check-format, package) need the developer packages too (deps-dev).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The CMake build runs make inside make inside make: without this every one of them prints
# "Entering directory"/"Leaving directory", thousands of lines around the compiler's and the
# tests' output. Errors and warnings still print, and ctest keeps --output-on-failure.
MAKEFLAGS += --no-print-directory
# ccache, where installed (scripts/install_deps.sh --dev installs it), for build/ and the package
# build: their compile commands differ only in the build folder, which CCACHE_BASEDIR makes
# relative, so the package build takes the main build's objects instead of compiling them again
# (a 5-minute build in 10 s on 2 cores). Recursive (=): looked up when a recipe runs, after
# deps-dev; empty clears a launcher an earlier configuration set.
CCACHE = $(shell command -v ccache 2>/dev/null)
CCACHE_ARGS = -DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps deps-dev configure build test test-sanitize fuzz demo package check-layers check-format \
        check-links tidy long-functions clean

all: build

deps:
	@scripts/install_deps.sh

deps-dev:
	@scripts/install_deps.sh --dev

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CCACHE_ARGS) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# --progress: on a terminal, one updating line instead of two per test; failures and the summary
# still print (and everything does when the output is not a terminal, as in CI). Two passes:
# the tests labelled unit, security or transport (their ports are bound by the test itself;
# test-sanitize runs the security and transport ones two at a time too) JOBS at a time, then the
# rest one at a time: many of those take a free port and bind it later, or count on timing
# bounds, and under -j2 two of 1509 failed that way once each while passing alone (`ctest -j2`
# stays for local runs). Both passes run; either failing fails.
# The package tests (label package) install what `make package` made into a clean Debian 12 root.
IN_PROCESS_LABELS := ^(unit|security|transport)$$
CTEST_FLAGS := --output-on-failure --progress --timeout 300 --no-tests=error
test: deps-dev build package
	@status=0; \
	  ctest --test-dir $(BUILD) $(CTEST_FLAGS) -j$(JOBS) -L '$(IN_PROCESS_LABELS)' || status=1; \
	  ctest --test-dir $(BUILD) $(CTEST_FLAGS) -LE '$(IN_PROCESS_LABELS)' || status=1; \
	  exit $$status

# The fault, garbage-input and security tests again, under AddressSanitizer and
# UndefinedBehaviorSanitizer in one build (half the compile time of one build each). sanitize_tests (tests/CMakeLists.txt) builds every test program
# of tests/{base,device,ps,fuzz,transport,runtime,integration} and what they launch. Then the
# threaded core under ThreadSanitizer (data races, lock-order inversions): tsan_tests builds the
# ps and base unit tests, the in-process server/scheduler test and the transport conformance
# suite, and the tests labelled tsan run them.
SANITIZE_LABELS ?= sanitize|security
test-sanitize: deps-dev
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DPSRT_SANITIZE=address,undefined \
	  $(CMAKE_ARGS) >/dev/null && \
	  cmake --build $(BUILD)-asan -j$(JOBS) --target sanitize_tests && \
	  ctest --test-dir $(BUILD)-asan -j$(JOBS) --output-on-failure --timeout 300 -L '$(SANITIZE_LABELS)'
	@cmake -S . -B $(BUILD)-thread -DCMAKE_BUILD_TYPE=Debug -DPSRT_SANITIZE=thread $(CMAKE_ARGS) >/dev/null && \
	  cmake --build $(BUILD)-thread -j$(JOBS) --target tsan_tests && \
	  ctest --test-dir $(BUILD)-thread -j$(JOBS) --output-on-failure --timeout 300 -L tsan

# The libFuzzer targets (tests/fuzz; clang, ASan and UBSan), each run for FUZZ_SECONDS from its
# checked-in seeds, JOBS at a time (scripts/run_fuzzers.sh). Fails on the first crash, sanitizer
# report, leak or input slower than 10 s, printing the log's end and where the input was saved.
FUZZ_SECONDS ?= 60
FUZZERS := protocol_fuzz:tests/fuzz/corpus checkpoint_fuzz:tests/fuzz/checkpoint_corpus \
           hello_fuzz:tests/fuzz/hello_corpus secure_fuzz:tests/fuzz/secure_corpus
fuzz: deps-dev
	@CC=clang CXX=clang++ cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPSRT_WITH_TORCH=OFF -DPSRT_WITH_CUDA=OFF $(CMAKE_ARGS) >/dev/null && \
	  cmake --build $(BUILD)-fuzz -j$(JOBS) --target $(foreach f,$(FUZZERS),$(firstword $(subst :, ,$(f))))
	@scripts/run_fuzzers.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(JOBS) $(FUZZERS)

# Only what the demo runs (psrun, pstrain, psbench: the demo_programs target, tools/), not the
# test suite.
demo: configure
	@cmake --build $(BUILD) -j$(JOBS) --target demo_programs
	@scripts/demo.sh $(BUILD)/bin

# The Debian packages (cmake/package.cmake) and the wheel (pyproject.toml, setup.py), from a build
# of their own in $(PACKAGE_BUILD): without CUDA (Debian ships no CUDA 13), without the tests,
# installed under /usr with the module for Debian's python3. Leaves psrt_<version>_amd64.deb,
# psrt-dev_<version>_amd64.deb and psrt-<version>-cp3X-*.whl in $(PACKAGE_BUILD)/packages.
PACKAGE_BUILD ?= $(BUILD)-package
package: deps-dev
	@cmake -S . -B $(PACKAGE_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr $(CCACHE_ARGS) \
	  -DPSRT_PACKAGE=ON -DPSRT_BUILD_TESTS=OFF -DPSRT_WITH_CUDA=OFF -DPSRT_WITH_TORCH=ON \
	  -DPSRT_WITH_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 \
	  -DPSRT_PYTHON_INSTALL_DIR=lib/python3/dist-packages $(CMAKE_ARGS) >/dev/null
	@cmake --build $(PACKAGE_BUILD) -j$(JOBS)
	@rm -rf $(PACKAGE_BUILD)/packages
	@cd $(PACKAGE_BUILD) && cpack -G DEB >/dev/null
	@PSRT_CMAKE_BUILD_DIR=$(abspath $(PACKAGE_BUILD)) PSRT_BUILD_JOBS=$(JOBS) /usr/bin/python3 -m pip \
	  wheel --no-build-isolation --no-deps --quiet -w $(PACKAGE_BUILD)/packages .
	@ls -1 $(PACKAGE_BUILD)/packages/*.deb $(PACKAGE_BUILD)/packages/*.whl

# Every relative link and #anchor in README.md, CONTRIBUTING.md and docs/ leads somewhere; CI runs it.
check-links:
	@scripts/check_links.py

# Every #include against the layers (README, Layout); CI runs it before the tests.
check-layers:
	@scripts/check_layers.sh

# Every tracked C++/CUDA source as clang-format 14 (.clang-format) writes it; CI runs it first.
check-format: deps-dev
	@scripts/check_format.sh

# clang-tidy 14 (.clang-tidy) over every project .cc but tests/fuzz, on a configuration of its
# own without LibTorch (scripts/tidy.sh says why); fails on any diagnostic. Needs no build: the
# compile commands are enough.
tidy: deps-dev
	@cmake -S . -B $(BUILD)-tidy -DCMAKE_BUILD_TYPE=Release -DPSRT_WITH_TORCH=OFF $(CMAKE_ARGS) >/dev/null
	@scripts/tidy.sh $(BUILD)-tidy $(JOBS)

# The functions of ps/, runtime/, tools/ and libtorch/ over 80 lines, longest first.
long-functions:
	@scripts/long_functions.sh

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-thread $(BUILD)-fuzz $(BUILD)-tidy \
	  $(PACKAGE_BUILD)
