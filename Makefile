# Set-up, demo and tests. `make demo` and `make test` each set up .venv first (idempotent): the demo
# with the core package alone, the tests with the [dev] extra (1.9 GB, 141 packages).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch that lies on the CI machines' disk. On a machine whose python3 already has
# torch (a GPU node), the venv sees that torch instead (--system-site-packages) and installs none.
TORCH_SPEC ?= torch==2.13.0
HAS_TORCH := $(shell $(PYTHON) -c 'import torch' 2>/dev/null && echo yes)
VENV_FLAGS := $(if $(HAS_TORCH),--system-site-packages,)

.PHONY: setup demo wheel lint test test-fast clean

# The venv with torch in it; the distribution's name before it was autotune-llm (autotune, PyPI's
# name of another project) uninstalled from a venv made then: the two would own one command.
define venv_with_torch
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip uninstall -q -y autotune 2>/dev/null || true
endef

setup: $(VENV)/.done

$(VENV)/.done: pyproject.toml
	$(venv_with_torch)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(VENV)/.core $@

# The demo needs the core package only (no extra): the tests' set-up, where it was made, serves too
$(VENV)/.core: pyproject.toml
	$(venv_with_torch)
	$(BIN)/pip install -q -e .
	touch $@

demo: $(VENV)/.core
	$(BIN)/autotune search search_spaces/tiny.yaml --fresh

# A wheel to install elsewhere: pip install dist/autotune_llm-*.whl (README: Install)
wheel:
	$(PYTHON) -m pip wheel -q --no-deps . -w dist

# Two pytest-xdist workers on CI's 2 cores, not -n auto: a test's trials are processes of their own
# (torch with its own threads, two ranks for torchrun). Three were tried (2026-12-05): one in-tree run
# took 604 s against 679 s with two, but two clean-clone runs took 690 and 703 s, within the spread
# of two workers' runs (644-691 s), and the extra load scattered two speed-judging tests. On a
# 16-core GPU node -n auto would start 16 at once: TEST_WORKERS=4 make test where cores are many.
# worksteal: an idle worker takes tests queued for another (a test lasts 0.01 s to minutes). The
# GPU tests take turns on a lock the workers share (tests/conftest.py): never two on one GPU.
TEST_WORKERS ?= 2
# --durations: the 25 slowest tests named at the end of each pass, so a CI log says where the time went
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25
# tests marked serial judge measured speed (check's verdicts) or device turns: beside another
# worker's trials their numbers would be the other test's load, so they run after, alone
SERIAL := $(BIN)/python -m pytest -q -p no:cacheprovider --durations=10
# only the files that hold serial tests are collected for that pass (collecting all took 8 s)
SERIAL_FILES = $(shell grep -l "mark\.serial" tests/test_*.py)

# One formatting rule, enforced (STYLE.md): ruff format and ruff check at 100 columns over the whole
# repository ([tool.ruff]), strict mypy on the whole package ([tool.mypy]).
# .ci/run runs it first.
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

test: setup
	$(PYTEST) -m "not serial" tests
	$(SERIAL) -m serial $(SERIAL_FILES)

# the inner loop: every test but the real searches, checks and multi-process runs (marked slow; a
# serial test is slow too: tests/conftest.py)
test-fast: setup
	$(PYTEST) -m "not slow" tests

clean:
	rm -rf $(VENV) dist trials/tiny trials/tiny.archived-*
