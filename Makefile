# airflow-patchset: patched Apache Airflow, built from pinned upstream wheels + a patch series.
# Everything bootstraps from a fresh clone: the first target run fetches, checks out, builds, installs.
# LINE selects the upstream release line: each lives in lines/<line>/ (upstream.lock, constraints.txt,
# line.toml, patches/) and builds into build/<line>/ and dist/<line>/; its venv is .venv for the
# default line (3.3) and .venv-<line> for the others (.venv-3.4).
SHELL := /bin/bash
PY ?= python3
LINE ?= 3.3
export PATCHSET_LINE := $(LINE)
PSTOOL := PYTHONPATH=$(CURDIR)/dev $(PY) -m pstool
VENV := $(if $(filter 3.3,$(LINE)),$(CURDIR)/.venv,$(CURDIR)/.venv-$(LINE))
PYTEST_ARGS ?=
DEMO_ARGS ?=
# make image: the base image (default: the official apache/airflow:<release>-python3.12 of the line) and
# the provider version changes to allow against it (upgrade, downgrade); docs/image.md.
BASE ?=
PROVIDER_CHANGES ?=

.PHONY: help fetch checkout export export-check check ledger hygiene verify install wheels services test test-fast test-e2e \
        demo image base-image containers release upgrade-db-from-3.3 export-upstream drift regenerate breeze-apply port port-continue twins clean

help:
	@echo "make test       bootstrap everything and run the whole test suite of one line (LINE=3.3 default)"
	@echo "make demo       start the patched Airflow locally and run the example Dags"
	@echo "make install    fetch + checkout (if needed) + build patched wheels + refresh .venv"
	@echo "make verify     series hygiene, trailers, strict apply, per-feature apply, review checks, generated files"
	@echo "make check      upstream's review checks on build/<line>/tree (pstool check)"
	@echo "make ledger     the AIP docs' guarantees ledgers: every named test exists (docs/development/ledger.md)"
	@echo "make hygiene    no internal issue number, round or 'asked by' in the patches and documents"
	@echo "make checkout   materialize build/<line>/tree (pristine base commit + series, strict git am)"
	@echo "make export     rewrite lines/<line>/patches/ from the tree's commits (byte-stable)"
	@echo "make port FROM=3.3 COMMIT=<sha>   carry one commit of a line's tree to the other lines' trees (3-way), re-export"
	@echo "make twins      each patch's twin on the other line, and what changed on one line only since the last port"
	@echo "make wheels     build patched wheels into dist/<line>/"
	@echo "make export-upstream FEATURE=aip-97   PR-ready series in build/<line>/upstream/FEATURE"
	@echo "make drift VERSION=3.3.3              classify each patch against a newer release"
	@echo "  every target takes LINE=3.4 for the 3.4 line (lines/3.4), e.g. make install LINE=3.4"
	@echo "make base-image build the stand-in for the official image: localhost/airflow-standin:<release> (Docker or Podman; debootstrap)"
	@echo "make image      build the patched image airflow-patchset:<release>-ps.N (Docker or Podman, no debootstrap; BASE=, PROVIDER_CHANGES=)"
	@echo "make release    bump every line's label (ps.N -> ps.N+1), write CHANGELOG.md, commit, tag v<release>-ps.N+1 (DRY_RUN=1: print only)"
	@echo "make upgrade-db-from-3.3   upgrade the configured patched-3.3.2 database to 3.4 with .venv-3.4 (README)"

fetch:
	$(PSTOOL) fetch

checkout:
	$(PSTOOL) checkout

export:
	$(PSTOOL) export

export-check:
	$(PSTOOL) export --check

# One fix, every line: carry COMMIT of the FROM line's tree into the other lines' trees (TO= picks one).
port:
	@test -n "$(FROM)" -a -n "$(COMMIT)" || (echo "usage: make port FROM=<line> COMMIT=<sha in build/<line>/tree> [TO=<line>]" >&2; exit 2)
	$(PSTOOL) port --from $(FROM) --commit $(COMMIT) $(if $(TO),--to $(TO))

port-continue:
	$(PSTOOL) port --continue

twins:
	$(PSTOOL) twins

install:
	$(PSTOOL) install

wheels:
	$(PSTOOL) build

regenerate:
	$(PSTOOL) regenerate

check:
	$(PSTOOL) check

ledger:
	$(PSTOOL) ledger

hygiene:
	$(PSTOOL) hygiene

verify: install
	$(PSTOOL) verify

services:
	bash .ci/services.sh

# Debian's podman and runc unless a Docker engine answers, and debootstrap (.ci/containers.sh): what
# make test and make test-e2e need (tests/image builds the stand-in base). make image needs only the engine.
containers:
	bash .ci/containers.sh all

RUN_TESTS := $(VENV)/bin/python dev/run_tests.py

test: services containers install
	$(PSTOOL) verify
	$(RUN_TESTS) $(PYTEST_ARGS)

test-fast: services install
	$(RUN_TESTS) -m "not e2e" $(PYTEST_ARGS)

test-e2e: services containers install
	$(RUN_TESTS) -m e2e $(PYTEST_ARGS)

# prepare, airflow db migrate, restore (dev/upgrade_from_3_3.py) on the database Airflow's configuration names.
upgrade-db-from-3.3:
	$(CURDIR)/.venv-3.4/bin/python dev/upgrade_from_3_3.py run

demo: install
	$(VENV)/bin/python dev/demo.py $(DEMO_ARGS)

# The stand-in base needs debootstrap (root to install it, .ci/containers.sh); make image does not.
base-image: fetch
	bash .ci/containers.sh base-image
	$(PSTOOL) base-image

# pstool image builds the patched wheels first (checking out the tree if need be), as make install does.
# Only a container engine is required: Docker when it answers, else Podman (no debootstrap, no root
# when either is there).
image:
	bash .ci/containers.sh image
	$(PSTOOL) image $(if $(BASE),--base $(BASE)) $(if $(PROVIDER_CHANGES),--provider-changes $(PROVIDER_CHANGES))

# docs/development/release.md: one commit bumps both lines' labels, with its CHANGELOG.md entry and
# lines/releases.toml record, tagged v<release>-ps.N per line. Nothing is pushed.
release:
	$(PSTOOL) release $(if $(DRY_RUN),--dry-run)

export-upstream:
	@test -n "$(FEATURE)" || (echo "usage: make export-upstream FEATURE=<feature>" >&2; exit 2)
	$(PSTOOL) export-upstream $(FEATURE)

# Upstream pull requests come from the 3.4 line (lines/README.md): without LINE= on the command line,
# Breeze gets the 3.4 series.
breeze-apply:
	@test -n "$(FEATURE)" -a -n "$(CHECKOUT)" || (echo "usage: make breeze-apply FEATURE=<feature> CHECKOUT=<upstream checkout> [LINE=3.3]" >&2; exit 2)
	$(PY) dev/breeze/apply_series.py --line $(if $(filter command line,$(origin LINE)),$(LINE),3.4) --checkout $(CHECKOUT) $(FEATURE)

drift:
	@test -n "$(VERSION)" || (echo "usage: make drift VERSION=<apache-airflow-core version>" >&2; exit 2)
	$(PSTOOL) drift $(VERSION)

clean:
	rm -rf build dist .venv .venv-*
