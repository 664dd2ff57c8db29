# The two set-up commands: `make demo` and `make test`. Both create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test lint bench docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	$(PY) -m pip install -q -c constraints.txt --no-deps litert-torch litert-converter xdsl
	$(PY) -m pip install -q -c constraints.txt --no-deps tf_keras tensorflow-model-optimization dm-tree
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) -m model_zoo.demo

test: install
	$(PY) -m pytest -n 2 -q $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check unframe tests bench model_zoo

bench: install
	$(PY) bench/startup.py
	$(PY) bench/frontends.py --quick

docs: install
	$(PY) -m unframe.tools.gen_docs

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
