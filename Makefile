# Set-up, demo and tests. `make demo` and `make test` each set up .venv first (idempotent).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch that lies on the CI machines' disk. On a machine whose python3 already has
# torch (a GPU node), the venv sees that torch instead (--system-site-packages) and installs none.
TORCH_SPEC ?= torch==2.13.0
HAS_TORCH := $(shell $(PYTHON) -c 'import torch' 2>/dev/null && echo yes)
VENV_FLAGS := $(if $(HAS_TORCH),--system-site-packages,)

.PHONY: setup demo test test-fast clean

setup: $(VENV)/.done

$(VENV)/.done: pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/autotune search search_spaces/tiny.yaml --fresh

test: setup
	$(BIN)/python -m pytest -q tests

# the inner loop: every test but the real searches, checks and multi-process runs (marked slow)
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow" tests

clean:
	rm -rf $(VENV) trials/tiny trials/tiny.archived-*
