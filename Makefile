# dra-gpu: two commands on a fresh machine.
#   make demo   set everything up and run the demo
#   make test   set everything up and run every check and test
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := $(CURDIR)/.venv/bin:/usr/local/go/bin:$(PATH)
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: all venv k8s images lint check-protos protos reference docs unit integration e2e test demo bench bench-scale bench-explain bench-mig fuzz soak gpu-check clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[explain]' --group dev --group previous-release --group docs
	rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

# The product's dependencies only, as the image installs them (no dev tools: import-linter alone
# pulls in rich, which structlog then imports): what make bench runs dra-gpu's plugin with.
PRODUCT_VENV := .venv-product
PRODUCT_STAMP := $(PRODUCT_VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
$(PRODUCT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(PRODUCT_VENV)
	$(PRODUCT_VENV)/bin/pip install -q --upgrade pip
	$(PRODUCT_VENV)/bin/pip install -q -e .
	rm -f $(PRODUCT_VENV)/.installed-*; touch $@

# Kubernetes components built from source (cached under ~/.cache/dra-gpu/k8s-<version>), Helm,
# Kueue's manager with its CRDs and webhook manifests (~/.cache/dra-gpu/kueue-<version>), and the
# container runtime the installed-path e2e and the demo run pods on (containerd + CNI + pause,
# cached under ~/.cache/dra-gpu/runtime-<version>; runc, mmdebstrap and buildah from Debian's
# packages, installed when missing).
k8s:
	scripts/host-tools.sh
	testkit/go/build.sh >/dev/null
	testkit/go/helm/build.sh >/dev/null
	testkit/go/promtool/build.sh >/dev/null
	testkit/go/kueue/build.sh >/dev/null
	testkit/go/runtime/build.sh >/dev/null

# The dra-gpu image and the demo's shell image, from deploy/container/Dockerfile without Docker
# (OCI archives under ~/.cache/dra-gpu/images; reused while the image's inputs are unchanged).
images: k8s
	deploy/container/build-local.sh >/dev/null

protos: venv
	$(VENV)/bin/python scripts/gen_protos.py

check-protos: venv
	tmp=$$(mktemp -d); $(VENV)/bin/python scripts/gen_protos.py --out $$tmp >/dev/null; \
	for f in $$(cd $$tmp && find proto -name '*_pb2*'); do \
	  cmp -s $$tmp/$$f $$f || { echo "stale generated stub $$f: run 'make protos'"; exit 1; }; done; rm -rf $$tmp

# The generated reference pages of docs/reference/ (scripts/gen_reference.py; a unit test fails
# when a committed page differs from what it prints).
reference: venv
	$(VENV)/bin/python scripts/gen_reference.py all

# The docs site (mkdocs.yml: README as home, docs/ as the rest) into site/; --strict fails on a
# broken link or anchor.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

lint: venv check-protos
	ruff check .
	ruff format --check dra_driver controller kubelet_plugin webhook tests scripts bench e2e testkit demo
	mypy .
	lint-imports
	python scripts/check_structure.py

unit: venv
	pytest -q tests/unit

integration: venv k8s
	pytest -q tests/integration

# The version matrix's releases (testkit/go/K8S_MATRIX) build in the background, at low priority, while
# the tests before e2e/test_version_matrix.py run; that module waits for them (testkit/go/build-matrix.sh).
e2e: venv images
	testkit/go/build-matrix.sh --background
	pytest -q tests/chart e2e

test: venv images lint docs
	testkit/go/build-matrix.sh --background
	pytest -q

# Longer fuzzing than make test's fixed budget (which is DRA_GPU_FUZZ_SCALE=1).
fuzz: venv
	DRA_GPU_FUZZ_SCALE=$${DRA_GPU_FUZZ_SCALE:-20} pytest -q tests/fuzz

demo: venv images
	@echo "== what a node with 8 fake H100s publishes: dra-gpu inventory --fake-gpus h100x8 --node-name node-a (first slice)"
	@dra-gpu inventory --fake-gpus h100x8 --node-name node-a | sed -n '1,40p'
	@echo "..."
	$(VENV)/bin/python -m demo.runner.demo

bench: venv k8s $(PRODUCT_STAMP)
	$(VENV)/bin/python -m bench.prepare_latency
	$(VENV)/bin/python -m bench.selectors
	# vs the Go reference driver (peer column empty without Go/peer source)
	$(VENV)/bin/python -m bench.peer --plugin-python $(PRODUCT_VENV)/bin/python --json docs/perf/data/peer.json
	$(VENV)/bin/python -m bench.plots --peer docs/perf/data/peer.json --out docs/perf/img

# The real kube-scheduler over 100 and 500 fake nodes publishing 8-GPU pools (full GPUs, dynamic
# MIG with the recommended profiles and with every profile): scheduling throughput, the
# scheduler's CPU per pod against full GPUs' and its CPU profile, steady-state API writes,
# explain's time (bench/cluster_scale/, about an hour on 2 cores; --nodes/--layouts/--pods to
# narrow it).
bench-scale: venv k8s
	$(VENV)/bin/python -m bench.cluster_scale $(BENCH_SCALE_ARGS)

# dra-gpu explain offline over 100 and 500 fake nodes of dynamic MIG (8 H100s, 208 devices each):
# median wall seconds of the CLI and one run by phase (bench/explain_scale.py, about a minute).
bench-explain: venv
	$(VENV)/bin/python -m bench.explain_scale --nodes 100 500 --json docs/perf/data/explain.json
	$(VENV)/bin/python -m bench.plots --explain docs/perf/data/explain.json --out docs/perf/img

# Dynamic MIG packing: a seeded churn of mixed MIG claims over 8 fake H100s and 8 fake A100s through
# the allocator simulator, per device order (bench/mig_fragmentation.py, about 5 minutes on 2 cores).
bench-mig: venv
	$(VENV)/bin/python -m bench.mig_fragmentation --events 600 --warmup 100 --seeds 1 2 3 --out docs/perf/data/mig-fragmentation.json

# Minutes of kubelet traffic against the plugin while it is killed, the API server paused and the
# checkpoint corrupted; prints the counts and every invariant violation (bench/soak/).
soak: venv k8s
	$(VENV)/bin/python -m bench.soak

# Every real-GPU check in one run, on a machine with an NVIDIA GPU (scripts/gpu_check.py): the
# read-only NVML checks, then the real plugin with NVML, a stand-in API server, the kubelet's gRPC
# calls and a torch workload under the claim's CDI spec. Report in $DRA_GPU_CHECK_OUT (or a new
# temp folder). Without a GPU it says it did not run and exits 0. Needs no venv and no network:
# GPU_CHECK_PYTHON (this checkout's .venv if there is one, else python3) must hold the plugin's
# dependencies; GPU_CHECK_ARGS passes flags (--fake-gpus h100x8: the self-test, anywhere).
GPU_CHECK_PYTHON ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
gpu-check:
	$(GPU_CHECK_PYTHON) scripts/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
