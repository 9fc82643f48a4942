# clusterforge: the two README commands are `make demo` and `make test`; both set themselves up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup system-packages demo test lint bench schema mutate clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip setuptools wheel
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install clusterforge with its dev extras

system-packages: ## install the missing Debian packages of tests/system-packages.txt (as root; else say what to run)
	tools/ensure-system-packages.sh

demo: setup ## check, plan, render and validate the example blueprints on this machine
	$(BIN)/python -m clusterforge.demo

test: system-packages setup ## the Debian packages the tests need, then the whole test suite (real fio, torch, Ansible converge, Pulumi mocks)
# -n 3 on the 2-core test machine: with two workers the CPUs idled a sixth of the time (the role tests wait on dpkg,
# chroot and subprocesses), which a third fills; tests/conftest.py hands out the longest modules first
	$(BIN)/python -m pytest -n 3 --dist loadscope $(PYTEST_ARGS)

lint: setup ## ruff, mypy on every package, ansible-lint (production profile)
	$(BIN)/ruff check blueprints clusterforge stacks validate tests bench
	$(BIN)/mypy blueprints clusterforge stacks validate
	cd roles/.. && $(BIN)/ansible-lint --profile production roles

bench: setup ## benchmarks (figures printed, never asserted)
	$(BIN)/python bench/run_all.py

mutate: setup ## mutation testing (cosmic-ray) of blueprints/rules, validate/suites, validate/parsers, validate/node_checks.py with their tests; slow, not part of `make test`. MUTATE_ARGS: e.g. --module validate/parsers/nccl.py --max-seconds 900
	$(BIN)/python tools/mutate.py $(MUTATE_ARGS)

schema: setup ## regenerate blueprints/schema/blueprint.schema.json
	$(BIN)/clusterforge schema -o blueprints/schema/blueprint.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .clusterforge build *.egg-info
