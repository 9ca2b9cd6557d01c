# The two commands of the README. Each one installs what is missing, configures and builds.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test test-sanitize demo clean

all: build

deps:
	@scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure --timeout 300

# The fault, garbage-input and identity tests again, under AddressSanitizer and
# UndefinedBehaviorSanitizer.
test-sanitize: deps
	@for s in address undefined; do \
	  cmake -S . -B $(BUILD)-$$s -DCMAKE_BUILD_TYPE=Debug -DPSRT_SANITIZE=$$s >/dev/null && \
	  cmake --build $(BUILD)-$$s -j$(JOBS) --target transport_conformance_test identity_test && \
	  ctest --test-dir $(BUILD)-$$s --output-on-failure --timeout 300 -L sanitize || exit 1; \
	done

demo: build
	@scripts/demo.sh $(BUILD)/bin

clean:
	rm -rf $(BUILD) $(BUILD)-address $(BUILD)-undefined
