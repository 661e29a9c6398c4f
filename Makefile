# skewgate: upgrade-safe routing for Kubernetes apiservers.
#
#   make demo    build what is missing, start a mixed-version control plane and skewgate in front of it
#   make test    everything CI runs (builds the testbed binaries on a cold cache first)

SHELL := bash
.SHELLFLAGS := -euo pipefail -c

# Apiserver versions the testbed can run; adding one is a one-word change here.
APISERVER_VERSIONS ?= v1.35.4 v1.36.3
ETCD_VERSION       ?= v3.6.8
# Binaries are cached here, keyed by version (gitignored).
TESTBED_DIR        ?= .testbed
GO                 ?= go
TEST_TIMEOUT       ?= 70m

export SKEWGATE_TESTBED_BIN := $(abspath $(TESTBED_DIR)/bin)

.PHONY: all build test test-unit vet testbed-bins testbed-up testbed-down clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet ./...

testbed-bins:
	hack/testbed-bins.sh $(TESTBED_DIR) $(ETCD_VERSION) $(APISERVER_VERSIONS)

test: testbed-bins vet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# Unit tests only: no testbed, no binaries.
test-unit:
	$(GO) test -short -race -count=1 ./...

$(TESTBED_DIR)/testbed: $(shell find test/testbed -name '*.go')
	$(GO) build -o $@ ./test/testbed/cmd/testbed

testbed-up: testbed-bins $(TESTBED_DIR)/testbed
	$(TESTBED_DIR)/testbed up --detach --dir $(TESTBED_DIR)/run

testbed-down: $(TESTBED_DIR)/testbed
	$(TESTBED_DIR)/testbed down --dir $(TESTBED_DIR)/run

clean:
	rm -rf bin $(TESTBED_DIR)/run $(TESTBED_DIR)/run.log $(TESTBED_DIR)/testbed

# The demo. Today it starts the mixed-version control plane and shows the problem skewgate solves;
# the front (Envoy or the test data plane with skewgate) joins it with issue #6.
.PHONY: demo demo-down
demo: testbed-up
	@kc=$(TESTBED_DIR)/run/admin-token.kubeconfig; \
	echo; echo "== the v1.35 apiserver: a wrong 404 for a resource the cluster serves"; \
	kubectl --kubeconfig $$kc --context old get --raw /apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies || true; \
	echo; echo "== the v1.36 apiserver serves it"; \
	kubectl --kubeconfig $$kc --context new get mutatingadmissionpolicies; \
	echo; echo "The skewgate front is not wired into the demo yet (issue #6). Stop with: make demo-down"

demo-down: testbed-down
