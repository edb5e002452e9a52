# Set-up and entry points. `make demo` and `make test` work from a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
OPM := $(VENV)/bin/opmatrix
STAMP := $(VENV)/.installed
OUT ?= out

.PHONY: setup demo test lint bench clean browser-deps

$(PY):
	python3 -m venv $(VENV)

# torch is pinned here (the local CPU wheel); the package itself asks for a range.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	@bash bench/demo.sh "$(OPM)" "$(OUT)"

# The browser tests drive Debian's chromium (never a downloaded browser); runs as root on CI machines.
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "installing Debian chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

test: setup browser-deps
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check opmatrix schema backend probes matrix reports ci tests bench
	$(VENV)/bin/mypy opmatrix schema

bench: setup
	$(PY) bench/bench_yaml.py

clean:
	rm -rf $(OUT) site build *.egg-info .pytest_cache
