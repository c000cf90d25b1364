# hami-py: the README's commands. `make demo` and `make test` set everything up from scratch.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install native k8s browser torch test demo bench soak clean

install: $(STAMP) native

# The virtual environment is (re)installed only when the packaging changes.
$(STAMP): setup.py constraints.txt
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

# The C libraries (simulated driver, shim); quick when nothing changed.
native:
	$(MAKE) -s -C c

# The real Kubernetes tier's components (tests/k8s): containerd, runc and the CNI plugins from
# Debian's packages, and Kubernetes + etcd built from their Go modules into
# ~/.cache/hami-py/k8s/<k8s>-etcd<etcd> (the first time about 25 minutes on 2 cores; then nothing).
k8s:
	bash tools/k8s/install-debs.sh
	bash tools/k8s/build.sh >/dev/null

# Headless Chromium and its WebDriver from Debian's packages, for the browser tier (tests/browser).
browser:
	bash tools/browser/install.sh

# PyTorch's CUDA wheel for the GPU tier (tests/gpu), pinned in tools/torch/requirements.txt,
# in a virtual environment cached under ~/.cache/hami-py/torch and linked as .venv/torch (the
# first time downloads about 2.8 GB, then nothing).
torch: install
	bash tools/torch/install.sh >/dev/null

test: install k8s browser torch
	$(VPY) -m pytest $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/hami-sim demo

# The soak with chaos (hami_sim/soak): a real cluster of its own, the openb mix of pods created
# and deleted at a steady rate while faults hit it, judged by the auditor (hami_sim/audit); an
# hour by default: `make soak SOAK_DURATION=600`, more options with SOAK_ARGS (see
# `python3 -m hami_sim.soak --help`). By default hami-py is installed by its Helm chart
# (--installed), the only mode with every fault kind (a rolling update, a helm rollback);
# `SOAK_ARGS=` runs hami-control and hami-node as host processes. Needs root, as tests/k8s does.
SOAK_DURATION ?= 3600
SOAK_ARGS ?= --installed
soak: install k8s
	$(VPY) -m hami_sim.soak --duration $(SOAK_DURATION) $(SOAK_ARGS)

bench: install
	$(VPY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,bench]'
	$(VPY) bench/run_all.py

clean:
	$(MAKE) -s -C c clean
	rm -rf build *.egg-info
