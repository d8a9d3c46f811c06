# vecshm developer tasks. `make install` once, then `make bench` (the main job) or `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# RLlib pins its own Gymnasium; its tests run in a second venv that borrows the first one's
# packages (torch, SB3, ale-py) from below its own, so only RLlib and its pins are installed there.
RLLIB_VENV ?= .venv-rllib
RLLIB_BIN := $(RLLIB_VENV)/bin

# Each venv is installed once (a stamp file in it), again only when pyproject.toml changes: the
# project is installed editable, so code changes need nothing. `make clean` starts over.
INSTALLED := $(VENV)/.vecshm-installed
RLLIB_INSTALLED := $(RLLIB_VENV)/.vecshm-installed

.PHONY: install install-rllib test test-suite test-suite-1 test-suite-2 test-portable test-rllib lint format bench bench-pytest bench-full bench-train bench-ray clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

install: $(INSTALLED)  ## the project, SB3 (CPU torch first), Atari, video, plots and test tools

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[dev]'
	touch $@

install-rllib: $(RLLIB_INSTALLED)  ## a second venv with vecshm[rllib] (RLlib and the Gymnasium it pins) over the first one's packages

$(RLLIB_INSTALLED): $(INSTALLED)
	test -x $(RLLIB_BIN)/python || $(PYTHON) -m venv $(RLLIB_VENV)
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
		"$$($(RLLIB_BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_vecshm_main_venv.pth"
	$(RLLIB_BIN)/pip install -q -e '.[rllib]'
	touch $@

# The tests whose subject is the transport, again on the portable one (the one macOS and Windows
# take): segments created, attached and freed (test_lifecycle.py), wake-ups and deaths seen
# (test_errors.py), and observations lent through units and pipes (test_async_ring.py). The layout
# and the facades sit above the transport and run once, in the suite (test_parity.py and the rest).
TRANSPORT_TESTS := tests/test_lifecycle.py tests/test_errors.py tests/test_async_ring.py

# SB3's tests of SubprocVecEnv on RayVecEnv; its DummyVecEnv cases, which never reach RayVecEnv, ran
# in the SB3 stage before.
RAY_SB3_TESTS := test_vec_envs and (SubprocVecEnv or test_subproc_start_method or test_vec_env_is_wrapped)

# vecshm's suite in two halves for `make test`: the first has the tests that wait most (Ray
# clusters, the docs' examples, killed parents, hung workers), the second every other file.
SUITE_FIRST_HALF := tests/test_ray.py tests/test_docs.py tests/test_lifecycle.py tests/test_errors.py \
	tests/test_affinity.py tests/test_bench_cli.py tests/test_custom_worker.py

# The README's test command. The two halves of vecshm's suite run side by side, then the RLlib
# venv's install and the transport's tests on the portable path take whichever side is free; each
# is printed when it ends. Alone, three of the suite's files kept 2 cores 71% busy, the portable
# stage 64%. The other projects' suites follow one at a time: they kept 2 cores 86-91% busy, and
# beside the suite they slowed about as much as they gained. The leak checks tell the sides apart:
# a /dev/shm entry that a live process outside the test's own tree has mapped is not counted
# (tests/conftest.py, shm_entries_left).
test: install  ## the README's test command: the suite, the transport's tests again on the portable path, SB3's and sb3-contrib's own tests (SB3's also on RayVecEnv), RLlib
	$(MAKE) --no-print-directory -j2 --output-sync=target test-suite-1 test-suite-2 install-rllib test-portable
	$(BIN)/python tests/sb3_suite/run.py
	$(BIN)/python tests/sb3_suite/run.py --suite sb3-contrib  # sb3-contrib's tests that build vec envs (MaskablePPO on SubprocVecEnv, ...)
	VECSHM_SB3_SUBPROC=ray $(BIN)/python tests/sb3_suite/run.py -k "$(RAY_SB3_TESTS)"
	$(RLLIB_TESTS)

test-suite: install  ## vecshm's test suite, in one run
	$(BIN)/python -m pytest -q

test-suite-1: install
	$(BIN)/python -m pytest -q -p no:cacheprovider $(SUITE_FIRST_HALF)

test-suite-2: install
	$(BIN)/python -m pytest -q -p no:cacheprovider $(addprefix --ignore=,$(SUITE_FIRST_HALF))

test-portable: install  ## the transport's tests on the portable path
	VECSHM_TRANSPORT=portable $(BIN)/python -m pytest -q -p no:cacheprovider $(TRANSPORT_TESTS)

# RLlib on vecshm (its tests and the docs' RLlib examples), and the Gymnasium-facade tests whose
# behaviour follows the installed Gymnasium's version (its errors, warnings and call checks) again
# on the Gymnasium RLlib pins.
RLLIB_TESTS = $(RLLIB_BIN)/python -m pytest -q tests/test_rllib.py tests/test_dropin.py tests/test_call_sequences.py tests/test_docs.py -k "not test_docs or rllib"

test-rllib: install-rllib  ## RLlib on vecshm, and the version-following Gymnasium-facade tests again on RLlib's Gymnasium
	$(RLLIB_TESTS)

lint:  ## ruff lint and format check
	$(BIN)/ruff check vecshm tests benchmarks examples
	$(BIN)/ruff format --check vecshm tests benchmarks examples

format:
	$(BIN)/ruff format vecshm tests benchmarks examples
	$(BIN)/ruff check --fix vecshm tests benchmarks examples

bench: install  ## the main job: vecshm vs SB3 and Gymnasium on the built-in pixel env, as a table
	$(BIN)/python -m vecshm.bench

bench-pytest: install  ## pytest-benchmark view of the step overhead
	$(BIN)/python -m pytest benchmarks -q

bench-full: install  ## every workload (Atari included), n_envs sweep, plot in bench-results/
	$(BIN)/python -m vecshm.bench -w frames dict busy200 variable vector pong -n 2 8 32 -s all -r 5

bench-train: install  ## end to end: SB3 PPO on Pong with vec_env_cls swapped (learner on the GPU if there is one)
	$(BIN)/python -m vecshm.bench.train

bench-ray: install  ## the cost of the Ray hop: RayVecEnv (one actor) against ShmVecEnv, same envs, one run
	$(BIN)/python -m vecshm.bench -w frames vector pong -s "vecshm ShmVecEnv" "RayVecEnv" "SB3 SubprocVecEnv" -o bench-results/ray

clean:
	rm -rf $(VENV) $(RLLIB_VENV) build dist *.egg-info bench-results .pytest_cache .ruff_cache .sb3-sdist
