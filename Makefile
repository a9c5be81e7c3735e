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

.PHONY: all setup build test docs demo run bench clean-runs

all: build

setup:
	@scripts/setup.sh

build: setup
	cargo build $(CARGO_FLAGS) --bins

test: setup
	cargo test $(CARGO_FLAGS) -- --test-threads=$(TEST_THREADS)

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
