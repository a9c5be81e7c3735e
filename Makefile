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

.PHONY: all setup build test docs demo bench clean-runs

all: build

setup:
	@scripts/setup.sh

build: setup
	cargo build $(CARGO_FLAGS) --bins

test: setup
	cargo test $(CARGO_FLAGS) -- --test-threads=$(TEST_THREADS)

docs:
	cargo run $(CARGO_FLAGS) --bin arl-docs -- write

demo: build
	scripts/demo.sh

bench: build
	scripts/bench/io.sh
