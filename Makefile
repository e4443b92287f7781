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

.PHONY: help sweep-cache stack stack-down build run stop stop-all demo bench bench-cost test fuzz lint k8s-lint e2e

##@ Help

help: ## Show the targets
	@awk 'BEGIN { FS = ":.*## "; printf "Usage:\n  make \033[36m<target>\033[0m\n" } \
		/^[a-zA-Z0-9_-]+:.*## / { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Local run

# A prerequisite of the targets that start the broker or build, so that make runs it once
# per call however many of them a target needs (demo: the stack, then the build). Before
# the stack: the broker refuses sends on a nearly full disk.
sweep-cache: ## Keep the build cache bounded (stale build artefacts removed)
	deploy/local/sweep-cache.sh

stack: sweep-cache ## Start the local Redis, MariaDB and RocketMQ (installs them first when missing)
	$(STACK) up

stack-down: ## Stop the local stack (its data is kept)
	$(STACK) down

build: sweep-cache ## Build the release binaries
	cargo build --release --workspace --bins

run: stack build ## Start the services in the background (.run/<service>.{pid,log})
	$(SERVICES) start

stop: ## Stop the services (the stack stays up)
	$(SERVICES) stop

stop-all: ## Stop the services, the stack and the fault drills' stack
	$(SERVICES) stop
	$(STACK) down
	SECKILL_RUN_DIR=.run/drills $(STACK) down

demo: stack build ## Run a simulated sale (5000 buyers, 500 units) and print the reconcile report
	deploy/local/demo.sh

bench: stack build ## Measure every stage against its ceiling (gateway, broker, consumer, reconcile, profiles); writes BENCHMARKS.md
	deploy/bench/run.sh

bench-cost: stack build ## CPU per sold unit against each part's floor, and the latency curve (a part of make bench, alone); prints Markdown
	deploy/bench/cost.sh

##@ Checks

# Cargo features the tests need compiled into the services' debug binaries: the fail points
# the fault drills (crates/fault-drills) arm. `cargo build` and `cargo test` below get the
# same list: both write target/debug/<service>, and a test build with other features would
# rebuild the binaries without the points. Add a service's feature here when it gains one.
TEST_FEATURES := order-consumer-svc/failpoints gateway-svc/failpoints

test: export SECKILL_TEST_REDIS_URL ?= redis://127.0.0.1:16379
test: export SECKILL_TEST_MYSQL_URL ?= mysql://seckill:seckill@127.0.0.1:13306
test: export SECKILL_TEST_NAMESRV ?= 127.0.0.1:19876
test: sweep-cache ## Everything CI runs: fmt, clippy, the stack, the debug binaries, cargo test
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --features "$(TEST_FEATURES)" -- -D warnings
	$(STACK) up
	cargo build --workspace --bins --features "$(TEST_FEATURES)"
	cargo test --workspace --features "$(TEST_FEATURES)"
	deploy/test/fuzz.sh 10
	deploy/test/api-contract.sh

fuzz: ## Fuzz the purchase-token verifier, the order message decoder and the order-token parser (300 s each)
	deploy/test/fuzz.sh

lint: ## fmt check, clippy, shellcheck, and k8s-lint
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	deploy/local/ensure-tools.sh shellcheck
	shellcheck deploy/local/*.sh deploy/*.sh deploy/bench/*.sh deploy/e2e/*.sh deploy/test/*.sh .ci/run
	deploy/k8s-lint.sh

# The dashboard and the alert rules are checked with the rest of `make lint`.
.PHONY: lint-observability
lint: lint-observability

lint-observability: ## Grafana dashboard (JSON, PromQL, coverage), Prometheus rules (promtool check + unit tests), their k8s rendering up to date
	deploy/local/ensure-tools.sh python3 shellcheck
	deploy/prometheus/ensure-promtool.sh
	shellcheck deploy/prometheus/*.sh
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts.test.yml
	deploy/prometheus/render-rule.sh --check
	promtool check config deploy/prometheus/prometheus.yml
	python3 deploy/prometheus/check-series.py
	python3 deploy/grafana/check-dashboard.py

k8s-lint: ## Render every k8s overlay, validate it (kubernetes-validate --strict), checkov it and the Dockerfile
	deploy/k8s-lint.sh

##@ Kubernetes

e2e: ## kind cluster: images, k8s/overlays/kind, a sale with the consumer scaled 1→3, reconcile (needs docker + kind; DRY_RUN=1 prints the steps, KEEP=1 keeps the cluster)
	deploy/e2e/kind-e2e.sh
