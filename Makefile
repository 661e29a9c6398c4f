# skewgate: upgrade-safe routing for Kubernetes apiservers.
#
#   make demo    build what is missing, start a mixed-version control plane and skewgate in front of it
#   make test    everything CI runs (builds the testbed binaries on a cold cache first)

SHELL := bash
.SHELLFLAGS := -euo pipefail -c

# Apiserver versions the testbed can run; adding one is a one-word change here.
APISERVER_VERSIONS ?= v1.35.4 v1.36.3
ETCD_VERSION       ?= v3.6.8
# kube-proxy for the in-cluster tests (test/incluster): the same Kubernetes module as the newest apiserver.
KUBE_PROXY_VERSION ?= v1.36.3
# kube-controller-manager for the control-plane tests (test/controllers): the oldest apiserver's module,
# as on a node not upgraded yet.
KCM_VERSION        ?= v1.35.4
# Binaries are cached here, keyed by version (gitignored).
TESTBED_DIR        ?= .testbed
GO                 ?= go
TEST_TIMEOUT       ?= 70m

export SKEWGATE_TESTBED_BIN := $(abspath $(TESTBED_DIR)/bin)

.PHONY: all build test test-unit vet testbed-bins testbed-up testbed-down clean

all: build

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= ghcr.io/skewgate/skewgate:$(VERSION)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o bin/ ./cmd/...

# The container image (needs docker or podman; not available on the development machines).
.PHONY: image
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

vet:
	$(GO) vet ./...

# The Debian packages the testbed needs (iptables for kube-proxy), then the binaries.
testbed-bins:
	hack/testbed-packages.sh
	KUBE_PROXY_VERSION=$(KUBE_PROXY_VERSION) KCM_VERSION=$(KCM_VERSION) hack/testbed-bins.sh $(TESTBED_DIR) $(ETCD_VERSION) $(APISERVER_VERSIONS)

# Every step timed (hack/maketest.sh); SKEWGATE_MAKETEST_RESULT=$PWD/bench/results/maketest.json
# records the run there (wall time per step, cores, commit, cold or warm caches, verdict): README's
# make test time comes from that file. The end-to-end tests run skewgate as a process (test/front):
# the script builds it once, as the tests are built (-race), into $(TESTBED_DIR)/skewgate-race.
test:
	SKEWGATE_TEST_BIN=$(abspath $(TESTBED_DIR)/skewgate-race) hack/maketest.sh "$(MAKE)" "$(GO)" "$(TEST_TIMEOUT)"

# A bounded fuzz run of the classifier against the apiserver's own RequestInfoFactory, of the
# route table against the decision table it is emitted from, of the OpenAPI key against kube-openapi's reading
# of the path, and of the OpenAPI document splitter against encoding/json (the committed corpora replay
# in every test run). Each run is bounded by a number of executions, not by a duration: with a duration,
# Go 1.26's fuzz coordinator can fail a run that found nothing with a bare "context deadline exceeded"
# at the deadline (golang/go#75804, fixed in Go 1.27). Each budget is about half a minute on 2 cores;
# the route table's budget is mostly the replay of its large seed corpus (baseline coverage).
FUZZ_CLASSIFY   ?= 200000x
FUZZ_ROUTETABLE ?= 2500x
FUZZ_OPENAPIKEY ?= 50000x
FUZZ_SPLIT      ?= 250000x
.PHONY: fuzz
fuzz:
	$(GO) test ./decision -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZ_CLASSIFY)
	$(GO) test ./test/equivalence -run '^$$' -fuzz '^FuzzRouteTableMatchesDecisionTable$$' -fuzztime $(FUZZ_ROUTETABLE)
	$(GO) test ./extproc -run '^$$' -fuzz '^FuzzOpenAPIPath$$' -fuzztime $(FUZZ_OPENAPIKEY)
	$(GO) test ./openapi -run '^$$' -fuzz '^FuzzSplitObject$$' -fuzztime $(FUZZ_SPLIT)

# Unit tests only: no testbed, no binaries.
test-unit:
	$(GO) test -short -race -count=1 ./...

$(TESTBED_DIR)/testbed: $(shell find test cmd internal serve kubeadm discovery extproc xds -name '*.go' -not -name '*_test.go')
	$(GO) build -o $@ ./test/testbed/cmd/testbed

testbed-up: testbed-bins $(TESTBED_DIR)/testbed
	$(TESTBED_DIR)/testbed up --detach --dir $(TESTBED_DIR)/run

testbed-down: $(TESTBED_DIR)/testbed
	$(TESTBED_DIR)/testbed down --dir $(TESTBED_DIR)/run

clean:
	rm -rf bin $(TESTBED_DIR)/run $(TESTBED_DIR)/run.log $(TESTBED_DIR)/testbed

# The demo: a v1.35 + v1.36 control plane, skewgate and a data plane in front of it (Envoy when
# ENVOY_BIN is set, else the test data plane), then the four commands that show the difference.
.PHONY: demo demo-down
demo: testbed-bins build $(TESTBED_DIR)/testbed
	SKEWGATE_BIN=$(abspath bin/skewgate) $(TESTBED_DIR)/testbed up --detach --front --dir $(TESTBED_DIR)/run
	@kc=$(TESTBED_DIR)/run/admin-token.kubeconfig; fkc=$(TESTBED_DIR)/run/front/front-admin-token.kubeconfig; \
	echo; echo "== 1. the v1.35 apiserver alone: a wrong 404 for a resource the cluster serves"; \
	kubectl --kubeconfig $$kc --context old get mutatingadmissionpolicies || true; \
	echo; echo "== 2. through skewgate: served"; \
	kubectl --kubeconfig $$fkc get mutatingadmissionpolicies; \
	echo; echo "== 3. through skewgate: the merged discovery lists it"; \
	kubectl --kubeconfig $$fkc api-resources --api-group admissionregistration.k8s.io; \
	echo; echo "== 4. through skewgate: its schema, from the apiservers that serve it"; \
	kubectl --kubeconfig $$fkc explain mutatingadmissionpolicies.spec --cache-dir $(TESTBED_DIR)/run/kubectl-cache | head -8; \
	echo; echo "Stop everything with: make demo-down"

demo-down: testbed-down

# Benchmarks: skewgate vs the in-tree Mixed Version Proxy vs the apiserver itself, on the testbed.
# Writes bench/results/ and prints the table; results.json names the commit, whether the tree was
# dirty and whether the run passed, and holds every in-process benchmark figure by name and unit.
.PHONY: bench
bench: testbed-bins
	mkdir -p bench/results
	$(GO) test ./extproc -run XXX -bench 'Classify|Decide|ServerDecide|ProcessRoundTrip' -benchmem | grep -E '^(Benchmark|goos|cpu)' > bench/results/extproc.txt
	$(GO) test ./decision -run XXX -bench 'Classify|TableDecide' -benchmem | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) test ./extproc -run XXX -bench ProcessLoad -benchtime 1x | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) test ./xds -run XXX -bench 'Translate|Push|Publish|ContentHash' -benchmem | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) test ./extproc -run XXX -bench 'DiscoveryDistinctAccept' -benchmem | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) test ./openapi -run XXX -bench 'OpenAPIDocument|OpenAPIProtobufRender' -benchmem | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) test ./discovery -run XXX -bench 'RenewalRebuilds|LeaseChurn|BuildOpenAPI' -benchmem | grep -E '^Benchmark' >> bench/results/extproc.txt
	$(GO) run ./test/bench --out bench/results --extproc bench/results/extproc.txt
