# Two entry points for a fresh Debian machine; each does its own set-up.
#   make test       install packages, build (CUDA too when nvcc exists), run every test, then,
#                   when all passed, the whole suite again under ASan+UBSan (test-sanitize)
#   make test-sanitize  only the ASan+UBSan pass (its own build folder, build-asan)
#   make reproduce  install packages, build the engine and the harness, generate the model for this
#                   machine, run it
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# The sanitizer build (CPU only): every test, the fuzz corpus replay included, under ASan+UBSan.
ASAN_BUILD ?= build-asan
SANITIZE_FLAGS ?= -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# RelWithDebInfo with line tables only (-g1): file:line in sanitizer reports, about 30 % less
# compile time than -g on 2 cores.
SANITIZE_OPT ?= -O2 -g1 -DNDEBUG

.PHONY: all deps build build-engine test test-sanitize reproduce clean

all: build

deps:
	bash scripts/setup-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# The sanitizer pass runs after the normal one, not beside it (2 cores), and only when the
# normal pass passed, so the output always ends with the summary of the pass that failed.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-sanitize

test-sanitize: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBG_ENABLE_CUDA=OFF \
	  -DCMAKE_C_FLAGS="$(SANITIZE_FLAGS)" -DCMAKE_CXX_FLAGS="$(SANITIZE_FLAGS)" \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$(SANITIZE_OPT)" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SANITIZE_OPT)"
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# What `make reproduce` runs, and nothing else: the engine and the harness (the tests, fuzzers and
# benchmarks are `make test`'s; on 2 cores they are most of a full build).
build-engine: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target betelgeuse betelgeuse-harness

reproduce: build-engine
	bash scripts/reproduce.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
