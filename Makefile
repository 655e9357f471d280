# Front end for the CMake build. `make test` and `make demo` work on a fresh Debian 12 machine:
# both install what is missing first (scripts/install-deps, a no-op when all is present).
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The sanitizer build runs the suite, so it is built for that: -O1 (as ASan's authors advise) and
# line tables only (enough for symbolized reports); it compiles in about half the time of -O2 -g.
ASAN_BUILD_FLAGS ?= -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
# ccache (when installed): hash paths relative to this checkout, so any clone hits the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps build test asan asan-build thread-safety bench fuzz demo drill format clean package

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 300

# The whole test suite under AddressSanitizer (with leak checks) and UndefinedBehaviorSanitizer.
asan-build: deps
	@cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVIGIL_SANITIZE=ON \
	  -DVIGIL_BUILD_BENCH=OFF $(ASAN_BUILD_FLAGS) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS)

asan: asan-build
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) --timeout 600

# Clang's thread-safety analysis over the product (the `vigil` binary and every library it links;
# not the tests): -Wthread-safety and -Wthread-safety-beta (the ABSL_ACQUIRED_BEFORE check) with
# -Werror, so a guarded member read without its lock, a lock
# taken out of its declared order or a function called without the lock it requires fails the
# build. Compiled without optimisation or debug info: only the analysis matters here.
TSA_DIR ?= build-tsa
thread-safety: deps
	@cmake -S . -B $(TSA_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0" -DCMAKE_C_FLAGS_DEBUG="-O0 -g0" \
	  -DVIGIL_THREAD_SAFETY=ON -DVIGIL_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSA_DIR) -j $(JOBS) --target vigil

# The memory benchmark runs alone first, in a fresh process, so other benchmarks do not inflate it.
bench: build
	$(BUILD_DIR)/bench/vigil_bench --benchmark_filter=Rss $(BENCH_ARGS)
	$(BUILD_DIR)/bench/vigil_bench --benchmark_filter=-Rss $(BENCH_ARGS)
	scripts/bench-scrape $(BUILD_DIR)/vigil
	scripts/bench-healthcheck $(BUILD_DIR)/vigil

# Every parser's fuzz target (testing/fuzz.h: the kernel log, HTTP request heads, durations,
# flight recordings, the remediation annotations, engine configs, scenarios, counters CSV, watch
# lines and list answers, pod-resources answers, ResourceSlices, NIC ports' sysfs files) under the
# sanitizers, each over FUZZ_ITERATIONS inputs (default 1,000,000; `make test` runs a short pass
# of each).
FUZZ_ITERATIONS ?= 1000000
FUZZ_TESTS ?= common_test api_test engine_test inject_test exporter_test kube_test \
  podresources_test dra_test kmsg_test network_test webconfig_test pidmap_test
fuzz: asan-build
	@for test in $(FUZZ_TESTS); do \
	  VIGIL_FUZZ_ITERATIONS=$(FUZZ_ITERATIONS) ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(ASAN_DIR)/src/$$test --gtest_filter='*FuzzTest.*' --gtest_brief=1 || exit 1; \
	done

# The whole alerting chain on one machine, proven by `vigil drill` (scripts/drill): vigil node on
# simulated GPUs, a real Prometheus with the project's rules and a real Alertmanager.
drill: build
	scripts/drill $(BUILD_DIR)/vigil

# The Debian package (CPack): build/vigil_<version>_<arch>.deb.
package: build
	cd $(BUILD_DIR) && cpack -G DEB

demo: build
	scripts/demo $(BUILD_DIR)/vigil

format:
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
