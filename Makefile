# seckill — the front door. `make` (or `make help`) lists the targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --no-print-directory

# Build output and the RocketMQ build live outside the clone, so they survive fresh clones.
export SECKILL_CACHE ?= $(HOME)/.cache/seckill
export CARGO_TARGET_DIR ?= $(SECKILL_CACHE)/target
export BIN_DIR ?= $(CARGO_TARGET_DIR)/release

STACK := deploy/local/stack.sh
SERVICES := deploy/local/services.sh

.PHONY: help stack stack-down build run stop stop-all demo test lint

##@ Help

help: ## Show the targets
	@awk 'BEGIN { FS = ":.*## "; printf "Usage:\n  make \033[36m<target>\033[0m\n" } \
		/^[a-zA-Z0-9_-]+:.*## / { printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Local run

stack: ## Start the local Redis, MariaDB and RocketMQ (installs them first when missing)
	$(STACK) up

stack-down: ## Stop the local stack (its data is kept)
	$(STACK) down

build: ## Build the release binaries
	cargo build --release --workspace --bins

run: stack build ## Start the services in the background (.run/<service>.{pid,log})
	$(SERVICES) start

stop: ## Stop the services (the stack stays up)
	$(SERVICES) stop

stop-all: ## Stop the services and the stack
	$(SERVICES) stop
	$(STACK) down

demo: stack build ## Run a simulated sale (5000 buyers, 500 units) and print the reconcile report
	deploy/local/demo.sh

##@ Checks

test: export SECKILL_TEST_REDIS_URL ?= redis://127.0.0.1:16379
test: export SECKILL_TEST_MYSQL_URL ?= mysql://seckill:seckill@127.0.0.1:13306
test: export SECKILL_TEST_NAMESRV ?= 127.0.0.1:19876
test: ## Everything CI runs: fmt, clippy, the stack, the debug binaries, cargo test
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(STACK) up
	cargo build --workspace --bins
	cargo test --workspace

lint: ## fmt check, clippy, shellcheck
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	deploy/local/ensure-tools.sh shellcheck
	shellcheck deploy/local/*.sh .ci/run
