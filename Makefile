# Two entry points for a fresh Debian machine; each does its own set-up.
#   make test       install packages, build (CUDA too when nvcc exists), run every test
#   make reproduce  install packages, build, generate the model for this machine, run it
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build test reproduce clean

all: build

deps:
	bash scripts/setup-deps.sh

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

reproduce: build
	bash scripts/reproduce.sh $(BUILD)

clean:
	rm -rf $(BUILD)
