# arl — the Makefile is the front door: `make demo` runs the main job,
# `make test` runs every test. Both set up what is missing first.
#
# libtorch comes from the PyPI wheel torch==2.13.0 in a virtualenv cached
# outside the repository (scripts/setup.sh); tch finds it through
# LIBTORCH_USE_PYTORCH=1 and the venv's python on PATH.
SHELL := /bin/bash
ARL_CACHE ?= $(HOME)/.cache/arl
VENV := $(ARL_CACHE)/venv-torch-2.13.0
export ARL_CACHE
export LIBTORCH_USE_PYTORCH := 1
export PATH := $(VENV)/bin:$(PATH)
export ARL_PYTHON := $(VENV)/bin/python
# One profile for everything (build, tests, demo, benchmarks): release.
CARGO_FLAGS ?= --release
# Bound on the test suite's threads (2 cores here).
TEST_THREADS ?= 2

# An experiment file for `make run` (see experiments/).
EXP ?= experiments/demo.env

.PHONY: all setup build test chaos fuzz docs demo run bench clean-runs

all: build

setup:
	@scripts/setup.sh

build: setup
	cargo build $(CARGO_FLAGS) --bins

# Every test: the cargo tests, then the fault and abuse suite on the release
# binaries they built (scripts/chaos.sh; its fuzz targets need cargo-fuzz,
# which scripts/setup-fuzz.sh installs; FUZZ_SECONDS per target, 0 skips).
FUZZ_SECONDS ?= 20
export FUZZ_SECONDS
test: setup
	cargo test $(CARGO_FLAGS) -- --test-threads=$(TEST_THREADS)
	scripts/setup-fuzz.sh
	scripts/chaos.sh

# The fault and abuse suite alone (`make chaos FILTER=serve/`).
chaos: build
	scripts/setup-fuzz.sh
	scripts/chaos.sh $(FILTER)

# Longer fuzzing: `make fuzz FUZZ_SECONDS=600` (FUZZ_GROW=1 keeps new corpus inputs).
fuzz: setup
	scripts/setup-fuzz.sh
	scripts/fuzz.sh $(FUZZ_SECONDS)

docs:
	cargo run $(CARGO_FLAGS) --bin arl-docs -- write

# The main job: a tiny model trained from scratch (SFT, then GRPO with a
# calculator tool against arl-serve); everything lands in runs/demo/.
demo: build
	scripts/run.sh experiments/demo.env

# Any experiment: `make run EXP=experiments/arith-mixed.env` → runs/<NAME>/.
run: build
	scripts/run.sh $(EXP)

bench: build
	scripts/bench/io.sh

clean-runs:
	rm -rf runs/
