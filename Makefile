# The two commands a newcomer needs: `make demo` and `make test`.
# Both create the virtual environment (.venv) on first use (with the dev, viz and realmodel extras:
# realmodel builds llama.cpp from source the first time, which needs a C compiler and cmake).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev,viz,realmodel]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tandem demo

# The suite on TEST_WORKERS pytest processes, a module whole on one (see tests/conftest.py): most
# of a test's time is spent waiting for celery workers, so more processes than the 2 cores pay.
TEST_WORKERS ?= 6
test: $(STAMP)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
