# The two commands: `make demo` and `make test`. Both set up the machine
# (scripts/bootstrap.sh), build, and run.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# ccache (scripts/bootstrap.sh installs it) keeps compiled objects between clean clones:
# paths under the checkout are hashed relative to it, so a new clone of the same sources
# builds from the cache (docs/ci.md). KIRI_CCACHE=0 builds without it.
KIRI_CCACHE ?= 1
ifeq ($(KIRI_CCACHE),1)
# Expanded when configure runs, after `setup` installed ccache (with := a fresh machine's first
# build, the one that fills the cache, went without it).
LAUNCHER = $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR := $(CURDIR)
# Debug builds (the ASan/UBSan one) put the working directory into their debug info, which
# ccache hashes by default, so a clone at another path missed every object; the paths in the
# debug info are then the first clone's, which only a debugger would notice.
export CCACHE_NOHASHDIR := 1
endif

.PHONY: all setup setup-test build demo test test-asan fuzz bench format clean

all: build

setup:
	@bash scripts/bootstrap.sh

# What the tests need beside the build: PyTorch for the outside-reference Llama.
setup-test:
	@bash scripts/bootstrap.sh test

# CMake writes $(BUILD)/Makefile only when configure succeeds, so a configure that
# failed (a missing package) is simply run again next time.
$(BUILD)/Makefile: | setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(LAUNCHER) $(CMAKE_FLAGS) >/dev/null

build: setup $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# Train the default small model on Moby-Dick for a couple of minutes, save a
# checkpoint and sample from it.
demo: setup $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS) --target kiri  # the binary only: the tests are make test's
	bash scripts/demo.sh $(BUILD)/kiri

test: setup-test build
	cd $(BUILD) && ctest --output-on-failure -j 2
	$(MAKE) test-asan

# The unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer: not the slow
# ones, nor the trainer suites' mpirun runs, whose bodies run there on threads
# (tests/CMakeLists.txt, kiri_mpi_suite), nor the *Timing suites, which measure rates that
# the sanitizers change (the Release run above checks them), nor the cluster label's runs
# across network-namespace hosts (the same kiri code the Release run crosses hosts with).
test-asan: setup
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DKIRI_SANITIZE=ON $(LAUNCHER) >/dev/null
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j 2 -LE 'slow|mpi_suite|timing|cluster'

# The libFuzzer targets (clang++, ASan + UBSan) in $(BUILD)-fuzz, each run for
# FUZZ_SECONDS (default 60); a finding fails with its input in $(BUILD)-fuzz/findings/.
fuzz:
	@bash scripts/bootstrap.sh fuzz
	FUZZ_BUILD=$(BUILD)-fuzz JOBS=$(JOBS) bash fuzz/run.sh

bench: build
	bash benchmarks/run.sh $(BUILD)

format:
	git ls-files '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
