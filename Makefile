# vecshm developer tasks. `make install` once, then `make bench` (the main job) or `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# RLlib pins its own Gymnasium, so its tests run in a second venv with vecshm[rllib] over it.
RLLIB_VENV ?= .venv-rllib
RLLIB_BIN := $(RLLIB_VENV)/bin

# Installs go through uv (installed into the first venv by pip): it resolves once, downloads in
# parallel and keeps every wheel in its cache, so the RLlib venv links the first venv's wheels
# instead of downloading them again. pip's find-links (where this machine keeps its CPU build of
# PyTorch) are passed on: uv does not read pip's configuration. Unlike pip, uv compiles no bytecode
# unless asked: where PYTHONDONTWRITEBYTECODE is set (this machine, CI) nothing ever writes it, and
# every worker, script and Ray process compiled its imports from source (the suite: 195 s -> 427 s).
UV := $(BIN)/uv
PIP_FIND_LINKS ?= $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
UV_INSTALL = $(UV) pip install --quiet --compile-bytecode $(addprefix --find-links ,$(PIP_FIND_LINKS))
# pinned, so SB3 does not pull the registry's newest (CUDA) build
TORCH := torch==2.13.0
# PufferLib's vectorizer, a peer in the bench: without its deps, which pin torch 2.9 (and CUDA's libraries);
# it imports only numpy, gymnasium and psutil
PUFFERLIB := pufferlib-core==3.0.23

# Each venv is installed once (a stamp file in it), again only when pyproject.toml changes: the
# project is installed editable, so code changes need nothing. `make clean` starts over.
INSTALLED := $(VENV)/.vecshm-installed
RLLIB_INSTALLED := $(RLLIB_VENV)/.vecshm-installed

.PHONY: install install-rllib test test-fast test-suite test-portable test-sb3 test-after-sb3 test-rllib test-wheel dist typecheck \
	docs docs-serve check lint format bench bench-pytest bench-full bench-train bench-ray clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv

install: $(INSTALLED)  ## the project, SB3 (CPU torch first), Atari, video, plots and test tools

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(UV_INSTALL) --python $(BIN)/python "$(TORCH)" -e '.[dev]'
	$(UV_INSTALL) --python $(BIN)/python --no-deps "$(PUFFERLIB)"
	touch $@

install-rllib: $(RLLIB_INSTALLED)  ## a second venv with vecshm[dev,rllib] (RLlib and the Gymnasium it pins)

$(RLLIB_INSTALLED): $(INSTALLED)
	test -x $(RLLIB_BIN)/python || $(PYTHON) -m venv --without-pip $(RLLIB_VENV)
	$(UV_INSTALL) --python $(RLLIB_BIN)/python "$(TORCH)" -e '.[dev,rllib]'
	touch $@

# pytest-xdist spreads vecshm's suite over processes: its tests mostly wait (for workers to start,
# for a timeout, for a script), so three processes keep two cores busier than one. The Ray tests
# share one cluster per module, in one of those processes (their xdist_group). The other
# projects' suites below are CPU-bound and run in one process: spread, sb3-contrib's took 4x longer.
XDIST ?= -n 3 --dist loadgroup
PYTEST = $(BIN)/python -m pytest -q -p no:cacheprovider
# The stages after the suite run beside SB3's and sb3-contrib's tests, which keep both cores busy:
# there each stage runs in one process (-n 0), as spreading it cost more CPU than it saved (each
# extra process imports the suite again: RLlib's 146 CPU-s against 102-117 in one).
STAGE_XDIST ?= -n 0

# SB3's tests of SubprocVecEnv on RayVecEnv; its DummyVecEnv cases, which never reach RayVecEnv, ran
# in the SB3 stage before.
RAY_SB3_TESTS := test_vec_envs and (SubprocVecEnv or test_subproc_start_method or test_vec_env_is_wrapped)

# The README's test command, one stage after another: vecshm's suite; the tests whose subject is
# the transport again on the portable one (the one macOS and Windows take); SB3's and
# sb3-contrib's own tests on vecshm's classes (SB3's also on RayVecEnv); RLlib on vecshm, with the
# tests checked against Gymnasium's AsyncVectorEnv again on the Gymnasium RLlib pins. Each stage
# runs only what differs there (the markers in pyproject.toml).
test: install  ## the README's test command: the suite, the portable transport, SB3's and sb3-contrib's own tests, RLlib, the wheel
	$(MAKE) --no-print-directory test-suite
	$(MAKE) --no-print-directory -j2 --output-sync=target test-sb3 test-after-sb3

# After the suite, SB3's and sb3-contrib's tests (one CPU-bound process at a time) run beside the
# other stages, each stage's output kept together: on 2 cores that takes a minute off `make test`.
test-after-sb3: test-portable test-rllib test-wheel

test-fast: install  ## what to run after each change (about 4 minutes on 2 cores): the suite less the tests marked slow
	$(PYTEST) $(XDIST) -m "not slow"

test-suite: install  ## vecshm's whole suite
	$(PYTEST) $(XDIST)

test-portable: install  ## the transport's tests on the portable path
	VECSHM_TRANSPORT=portable $(PYTEST) $(STAGE_XDIST) -m transport

test-sb3: install  ## SB3's and sb3-contrib's own tests on vecshm's classes, SB3's also on RayVecEnv
	$(BIN)/python tests/sb3_suite/run.py
	$(BIN)/python tests/sb3_suite/run.py --suite sb3-contrib  # those that build vec envs (MaskablePPO on SubprocVecEnv, ...)
	VECSHM_SB3_SUBPROC=ray $(BIN)/python tests/sb3_suite/run.py -k "$(RAY_SB3_TESTS)"

test-rllib: install-rllib  ## RLlib on vecshm, and the tests checked against AsyncVectorEnv again on RLlib's Gymnasium
	$(RLLIB_BIN)/python -m pytest -q -p no:cacheprovider $(STAGE_XDIST) -m "rllib or gymnasium_peer"

# The package as users get it: the sdist and the wheel built by the standard frontend (isolated,
# from pyproject.toml alone), with no warning (setuptools warns of deprecated metadata there, and
# of skipped byte-compilation where PYTHONDONTWRITEBYTECODE is set, as here: unset for the build),
# and their metadata checked as PyPI would. Then the wheel installed into a fresh venv, not
# editable, and its smoke tier (-m smoke) run from outside the checkout (.ci/wheel-smoke).
dist: install  ## build the sdist and the wheel into dist/, failing on any build warning; twine check them
	rm -rf dist
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m build --outdir dist . > dist.log 2>&1 || (cat dist.log; exit 1)
	! grep -i -B2 -A2 warn dist.log
	rm dist.log
	$(BIN)/twine check --strict dist/*

test-wheel: dist  ## the wheel in a fresh venv (not editable), its smoke tier run from outside the checkout
	UV=$(UV) UV_ARGS="$(addprefix --find-links ,$(PIP_FIND_LINKS))" PYTEST_XDIST="$(STAGE_XDIST)" .ci/wheel-smoke dist/vecshm-*.whl $(PYTHON)

# mypy at its default level over vecshm/ (the settings and the baseline in pyproject.toml), and a
# user's code (tests/typed_client.py) under --strict: vecshm's errors there are the first run's.
typecheck: install  ## mypy over vecshm/, and tests/typed_client.py strictly
	$(BIN)/python -m mypy
	$(BIN)/python -m mypy --strict --follow-imports=silent tests/typed_client.py

docs: install  ## the docs site into site/, strictly: a broken link or API reference fails
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: install  ## serve the docs site at http://127.0.0.1:8000, rebuilt on each change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

check: lint typecheck docs  ## what CI checks besides the tests: ruff, mypy, the docs site

LINTED := vecshm tests benchmarks examples docs

lint:  ## ruff lint and format check
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

format:
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

bench: install  ## the main job: vecshm vs SB3 and Gymnasium on the built-in pixel env, as a table
	$(BIN)/python -m vecshm.bench

bench-pytest: install  ## pytest-benchmark view of the step overhead
	$(BIN)/python -m pytest benchmarks -q

bench-full: install  ## every workload (Atari included), n_envs sweep, plots in bench-results/ (Tianshou, TorchRL too)
	$(UV_INSTALL) --python $(BIN)/python "$(TORCH)" -e '.[dev,peers]'
	$(BIN)/python -m vecshm.bench -w frames dict busy200 variable vector pong -n 2 8 32 -s all -r 5

bench-train: install  ## end to end: SB3 PPO on Pong with vec_env_cls swapped (learner on the GPU if there is one)
	$(BIN)/python -m vecshm.bench.train
	$(BIN)/python -m vecshm.bench.train --env ALE/Pong-v5 --raw-frames -o bench-results/raw

bench-ray: install  ## the cost of the Ray hop: RayVecEnv (one actor) against ShmVecEnv, same envs, one run
	$(BIN)/python -m vecshm.bench -w frames vector pong -s "vecshm ShmVecEnv" "RayVecEnv" "SB3 SubprocVecEnv" -o bench-results/ray

clean:
	rm -rf $(VENV) $(RLLIB_VENV) build dist dist.log site *.egg-info bench-results .pytest_cache .ruff_cache .mypy_cache .sb3-sdist
