# The two set-up commands of the README. Each does all of its own set-up.
.PHONY: run test lint bench

run:  ## create .venv, install, migrate and start the broker on embedded defaults
	tools/run.sh

test:  ## create/update .venv and run the whole suite (lint, types, tests)
	tools/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
