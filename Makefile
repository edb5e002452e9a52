# Set-up and entry points. `make demo` and `make test` work from a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
OPM := $(VENV)/bin/opmatrix
STAMP := $(VENV)/.installed
OUT ?= out

.PHONY: setup demo test test-fast test-cluster test-xla test-compat lint bench clean browser-deps docs

$(PY):
	python3 -m venv $(VENV)

# torch is pinned here (the local CPU wheel); the package itself asks for a range. The editable
# install's one note from setuptools (its import finder for package-dir layouts) is filtered.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q --disable-pip-version-check -e '.[test,dev,docs,ray]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	@bash bench/demo.sh "$(OPM)" "$(OUT)"

# The browser tests drive Debian's chromium (never a downloaded browser). This is the only step
# that touches the system: it runs apt-get (as root, or through sudo) and says so first.
browser-deps:
	@if [ -x /usr/bin/chromium ]; then \
	  echo "browser-deps: /usr/bin/chromium is present (the browser tests use it; nothing to install)"; \
	else \
	  echo "browser-deps: installing the Debian package 'chromium' with apt-get, system-wide: the browser"; \
	  echo "browser-deps: tests (tests/test_reports_browser.py) open the HTML site in it. Skip with 'make test-fast'."; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq || exit 1; \
	  n=$$(apt-get install -s --no-install-recommends chromium | grep -c '^Inst'); \
	  echo "browser-deps: apt-get installs $$n Debian packages (chromium and its libraries, no recommends)"; \
	  log=$$(mktemp); \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium > $$log 2>&1 \
	    || { cat $$log; rm -f $$log; exit 1; }; rm -f $$log; echo "browser-deps: installed /usr/bin/chromium"; \
	fi

# Everything: the fast tests, the slow end-to-end ones (real probes in subprocesses) and the browser.
# TEST_JOBS pytest processes (pytest-xdist, one test file each at a time: module fixtures are built
# once), then the tests that measure real time, alone (marker `serial`: the perf gate's own checks),
# then the docs site (mkdocs --strict: a broken link or a page missing from the nav fails). Every
# stage runs even when an earlier one failed; the target fails if any did.
TEST_JOBS ?= 2
test: setup browser-deps
	@rc=0; \
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not serial and not cluster" || rc=1; \
	$(PY) -m pytest -q -m serial || rc=1; \
	$(MAKE) --no-print-directory docs || rc=1; \
	exit $$rc

# The Ray executor on real local Ray clusters (one node; two `ray start` nodes on loopback, one of
# them killed mid-run): about two minutes of their own, so a stage of .ci/run after make test.
test-cluster: setup
	$(PY) -m pytest -q -m cluster

# The user docs (docs/, mkdocs.yml), built strictly into site-docs/, then checked to load nothing from
# another host (no web fonts, no CDN scripts): an air-gapped lab reads them.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -q -d site-docs
	$(PY) bench/offline_docs.py site-docs

# The inner loop: no slow end-to-end tests, no browser (nothing installed on the system).
test-fast: setup
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile -m "not slow and not browser"

# XLA devices, proven on torch_xla's CPU device (PJRT_DEVICE=CPU). torch_xla pins its torch (2.9: a
# CUDA build, several GB), so torch and torch_xla live outside the clone in a cache folder keyed by
# both versions, reused by every clone and run. .venv-xla is a small venv of this clone that sees
# the cache through a .pth file and holds this clone's editable opmatrix (clones sharing the cache
# never re-point each other's install). The install is bounded by XLA_INSTALL_TIMEOUT seconds so a
# slow mirror fails CI with a message instead of eating its limit.
XLA_TORCH ?= 2.9.0
XLA_VERSION ?= 2.9.0
XLA_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/opmatrix
XLA_HOME := $(XLA_CACHE)/venv-xla-torch$(XLA_TORCH)-xla$(XLA_VERSION)
XLA_INSTALL_TIMEOUT ?= 1800
XLA_PY := .venv-xla/bin/python
# the xla tests, plus the suite that must hold on the oldest torch of the window (not refaccel:
# its Python PrivateUse1 API, torch._C._acc, is newer than torch 2.9)
XLA_TESTS ?= tests/test_xla.py tests/test_schema_io.py tests/test_probes_engine.py tests/test_matrix_records.py \
	tests/test_matrix_rollup.py tests/test_matrix_compress.py tests/test_matrix_query.py tests/test_runner_faults.py \
	tests/test_runner_journal.py tests/test_gate_evaluate.py

$(XLA_HOME)/.installed:
	@mkdir -p $(XLA_CACHE)
	@test -x $(XLA_HOME)/bin/python || python3 -m venv $(XLA_HOME)
	@echo "test-xla: installing torch==$(XLA_TORCH) torch_xla==$(XLA_VERSION) into $(XLA_HOME) (several GB, once)"
	@timeout $(XLA_INSTALL_TIMEOUT) $(XLA_HOME)/bin/python -m pip install -q --disable-pip-version-check \
	    torch==$(XLA_TORCH) torch_xla==$(XLA_VERSION) expecttest; rc=$$?; \
	  if [ $$rc -eq 124 ]; then echo "test-xla: FAILED: the torch_xla install took longer than XLA_INSTALL_TIMEOUT=$(XLA_INSTALL_TIMEOUT) s; rerun to retry (pip keeps the wheels it finished downloading)" >&2; exit 1; \
	  elif [ $$rc -ne 0 ]; then echo "test-xla: FAILED: pip could not install torch==$(XLA_TORCH) torch_xla==$(XLA_VERSION) (exit $$rc)" >&2; exit 1; fi
	touch $@

.venv-xla.stamp: pyproject.toml $(XLA_HOME)/.installed
	rm -rf .venv-xla && python3 -m venv .venv-xla
	$(XLA_HOME)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
	  > "$$($(XLA_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/opmatrix-xla-cache.pth"
	$(XLA_PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

test-xla: .venv-xla.stamp
	PJRT_DEVICE=CPU $(XLA_PY) -m pytest -q $(XLA_TESTS)

# Level 7 on two torch versions: the same op set probed under torch $(XLA_TORCH) (the environment
# test-xla caches) and this clone's torch, with the install, doctor and profiler checks of each; the
# gate must then find the compatibility window of ci/contracts/cpu-compat.yaml kept (L7.compat
# passes; its level 6 needs performance records and stays unknown here, and the gate says so).
COMPAT_OUT ?= $(OUT)/ci-compat
test-compat: setup .venv-xla.stamp
	$(OPM) compat --backend cpu --torch $(XLA_TORCH),$$($(PY) -c "import torch; print(torch.__version__.split('+')[0])") \
	  --ops add,mul,mm,softmax --out $(COMPAT_OUT)
	-$(OPM) gate --contract ci/contracts/cpu-compat.yaml --compat $(COMPAT_OUT)/compat.yaml --json $(COMPAT_OUT)/gate.json
	$(PY) -c "import json, sys; r = {q['id']: q['status'] for q in json.load(open(sys.argv[1]))['requirements']}; \
	  print('level 7 (L7.compat):', r.get('L7.compat')); sys.exit(0 if r.get('L7.compat') == 'pass' else 1)" $(COMPAT_OUT)/gate.json

# ruff, then mypy over the packages as installed: the folders schema/, probes/, ... are
# opmatrix.schema, opmatrix.probes, ... only through setuptools' package-dir, which mypy cannot
# follow (run on the folders, it sees every import of opmatrix.* as Any); a tree of links named as
# installed lets it check across packages.
lint: setup
	$(VENV)/bin/ruff check opmatrix schema backend probes matrix reports ci tests bench
	rm -rf build/mypy && mkdir -p build/mypy/opmatrix
	for f in opmatrix/*.py; do ln -s "$(CURDIR)/$$f" build/mypy/opmatrix/; done
	for d in schema backend probes matrix reports ci; do ln -s "$(CURDIR)/$$d" build/mypy/opmatrix/$$d; done
	cd build/mypy && $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml -p opmatrix

bench: setup
	$(PY) bench/bench_yaml.py

clean:
	rm -rf $(OUT) site site-docs build *.egg-info .pytest_cache
