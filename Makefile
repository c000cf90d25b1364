# hami-py: the README's commands. `make demo` and `make test` set everything up from scratch.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install native test demo bench clean

install: $(STAMP) native

# The virtual environment is (re)installed only when the packaging changes.
$(STAMP): setup.py constraints.txt
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# The C libraries (simulated driver, shim); quick when nothing changed.
native:
	$(MAKE) -s -C c

test: install
	$(VPY) -m pytest $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/hami-sim demo

bench: install
	$(VPY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,bench]'
	$(VPY) bench/run_all.py

clean:
	$(MAKE) -s -C c clean
	rm -rf build *.egg-info
