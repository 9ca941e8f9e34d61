# nodewright-bridge developer entry points. Everything installs into ./.venv; the control plane,
# root filesystem and images are cached under ~/.cache/nodewright-bridge (shared across clones).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup system-deps venv control-plane kubelet-tier lint test unit collection demo plan-demo images push-images lock clean

## setup: system packages, the Python venv and the cached control plane (idempotent); with
## NWB_KUBELET_TIER=1 also the kubelet tier (kubelet, containerd, crictl; see kubelet-tier)
setup: system-deps venv control-plane $(if $(filter 1,$(NWB_KUBELET_TIER)),kubelet-tier)

system-deps:
	@bash scripts/install-system-deps.sh

# The runtime dependencies come at the versions of requirements.lock (what the controller image
# ships); pip constraints carry no hashes, so the lock's hashes are stripped for this step.
venv: $(BIN)/nwb
$(BIN)/nwb: pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@sed -e 's/ --hash=.*//' requirements.lock > $(VENV)/constraints.txt
	@$(BIN)/pip install --quiet -c $(VENV)/constraints.txt -e '.[dev]'
	@touch $(BIN)/nwb

control-plane:
	@bash nodewright_bridge/sandbox/build-control-plane.sh >/dev/null

## kubelet-tier: build and cache kubelet, containerd (+ runc shim) and crictl at pinned versions,
## for `nwb sandbox up --mode kubelet` (runc and the CNI plugins come from Debian)
kubelet-tier: control-plane
	@NWB_KUBELET_TIER=1 bash scripts/install-system-deps.sh
	@bash nodewright_bridge/sandbox/build-kubelet-tier.sh >/dev/null

## lint: ruff, mypy --strict and the import-linter layering contracts
lint: venv
	$(BIN)/ruff check lifecycle playbook_adapter nodewright_bridge tests
	$(BIN)/ruff format --check lifecycle playbook_adapter nodewright_bridge tests
	$(BIN)/mypy
	$(BIN)/lint-imports

## test: everything CI runs (lint + collection sanity + unit + integration + e2e); a skipped
# test fails it (tests/support/tier_guard.py). Two pytest-xdist workers, whole files each (a
# module's fixtures stay on one worker; each worker starts its own sandboxes on free ports).
test: lint collection kubelet-tier
	NWB_REQUIRE_ALL_TIERS=1 $(BIN)/pytest -q -n 2 --dist loadfile --durations=25

COLLECTION := collections/ansible_collections/nodewright/bridge
## collection: ansible-test sanity (no ignore entries) and the Galaxy artifact in dist/
collection: venv
	@# ansible-test bootstraps pip in its venvs from a host we cannot reach; use the stdlib's pip.
	@mkdir -p $(HOME)/.ansible/test/cache
	@cp scripts/ansible-test-get-pip.py $(HOME)/.ansible/test/cache/get_pip_24_2.py
	cd $(COLLECTION) && $(abspath $(BIN))/ansible-test sanity --python 3.11 --local
	$(BIN)/ansible-galaxy collection build --force --output-path dist $(COLLECTION)

unit: venv
	$(BIN)/pytest -q tests/unit

## demo: the main job end to end - sandbox, example packages, policy, CR, controller, live progress
## (again: reuses the running demo sandbox; `.venv/bin/nwb demo --down` stops it)
demo: setup
	$(BIN)/nwb demo

## plan-demo: the offline planner on the shipped examples (no cluster needed)
plan-demo: venv
	$(BIN)/nwb plan --offline -f examples/rollouts/gpu-tuning.yaml -p examples/policies/canary.yaml --nodes examples/nodes/fleet-12.yaml
	@echo; echo "--- the same rollout when gpu-a100-0 fails (failureThreshold 1 stops gpu-a100):"
	$(BIN)/nwb plan --offline -f examples/rollouts/gpu-tuning.yaml -p examples/policies/canary.yaml --nodes examples/nodes/fleet-12.yaml --fail gpu-a100-0
	@echo; echo "--- legacy interruptionBudget count 3 on 10 nodes:"
	$(BIN)/nwb plan --offline -f examples/worked/legacy-count-3.yaml --nodes examples/nodes/fleet-10.yaml

## images: the controller image (IMAGE, default localhost/nodewright-bridge:<version>, the chart's
## default image) and the agent base image that package images start from
IMAGE ?=
images: venv
	$(BIN)/nwb image build controller $(if $(IMAGE),--tag $(IMAGE))
	$(BIN)/nwb image build agent-base

## push-images: build and push the controller image to IMAGE (e.g. IMAGE=<registry>/<path>:<tag>)
push-images: venv
	@test -n "$(IMAGE)" || { echo "set IMAGE=<registry>/<path>:<tag>" >&2; exit 2; }
	$(BIN)/nwb image build controller --tag $(IMAGE) --push

## lock: resolve requirements.lock again after changing dependencies in pyproject.toml
lock: venv
	$(BIN)/nwb image lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
