# airflow-patchset: patched Apache Airflow 3.3.2, built from pinned upstream wheels + patches/.
# Everything bootstraps from a fresh clone: the first target run fetches, checks out, builds, installs.
SHELL := /bin/bash
PY ?= python3
PSTOOL := PYTHONPATH=$(CURDIR)/dev $(PY) -m pstool
VENV := $(CURDIR)/.venv
PYTEST_ARGS ?=
DEMO_ARGS ?=

.PHONY: help fetch checkout export export-check check verify install wheels services test test-fast test-e2e \
        demo image export-upstream drift regenerate breeze-apply clean

help:
	@echo "make test       bootstrap everything and run the whole test suite (what CI runs)"
	@echo "make demo       start the patched Airflow locally and run the example Dags"
	@echo "make install    fetch + checkout (if needed) + build patched wheels + refresh .venv"
	@echo "make verify     series hygiene, trailers, strict apply, per-feature apply, review checks, generated files"
	@echo "make check      upstream's review checks on build/tree (pstool check)"
	@echo "make checkout   materialize build/tree (pristine base commit + series, strict git am)"
	@echo "make export     rewrite patches/ from build/tree's commits (byte-stable)"
	@echo "make wheels     build patched wheels into dist/"
	@echo "make export-upstream FEATURE=aip-97   PR-ready series in build/upstream/FEATURE"
	@echo "make drift VERSION=3.3.3              classify each patch against a newer release"
	@echo "make image      docker build of docker/Dockerfile (needs a Docker engine)"

fetch:
	$(PSTOOL) fetch

checkout:
	$(PSTOOL) checkout

export:
	$(PSTOOL) export

export-check:
	$(PSTOOL) export --check

install:
	$(PSTOOL) install

wheels:
	$(PSTOOL) build

regenerate:
	$(PSTOOL) regenerate

check:
	$(PSTOOL) check

verify: install
	$(PSTOOL) verify

services:
	bash .ci/services.sh

RUN_TESTS := $(VENV)/bin/python dev/run_tests.py

test: services install
	$(PSTOOL) verify
	$(RUN_TESTS) $(PYTEST_ARGS)

test-fast: services install
	$(RUN_TESTS) -m "not e2e" $(PYTEST_ARGS)

test-e2e: services install
	$(RUN_TESTS) -m e2e $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/python dev/demo.py $(DEMO_ARGS)

image: wheels
	@if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then \
	  echo "make image: no Docker engine is reachable here (docker info failed)." >&2; \
	  echo "Build on a machine with Docker: make wheels && docker build -f docker/Dockerfile ." >&2; \
	  exit 1; \
	fi
	docker build -f docker/Dockerfile -t airflow-patchset:3.3.2 .

export-upstream:
	@test -n "$(FEATURE)" || (echo "usage: make export-upstream FEATURE=<feature>" >&2; exit 2)
	$(PSTOOL) export-upstream $(FEATURE)

breeze-apply:
	@test -n "$(FEATURE)" -a -n "$(CHECKOUT)" || (echo "usage: make breeze-apply FEATURE=<feature> CHECKOUT=<upstream checkout>" >&2; exit 2)
	$(PY) dev/breeze/apply_series.py --checkout $(CHECKOUT) $(FEATURE)

drift:
	@test -n "$(VERSION)" || (echo "usage: make drift VERSION=<apache-airflow-core version>" >&2; exit 2)
	$(PSTOOL) drift $(VERSION)

clean:
	rm -rf build dist .venv
