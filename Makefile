# winnet — run `make help` for the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
# winnet is built with the Go toolchain go.mod names (its toolchain line, a patch release that fixes the
# standard library's advisories the machine's Go has): the go command fetches it from the module proxy
# once and keeps it in the module cache.
WINNET_TOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
export GOTOOLCHAIN := $(WINNET_TOOLCHAIN)

GO ?= go
BIN := $(CURDIR)/bin
CONTROLLER_GEN := $(GO) tool controller-gen
PLATFORMS := linux windows
GO_TEST_FLAGS ?= -count=1 -timeout 20m
# NETPOL_MODULE is the test-only Go module that judges NetworkPolicy with cyclonus; `go test ./...`
# does not enter it, so test, vet and conformance-netpol call it themselves.
NETPOL_MODULE := test/netpol

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code, OVSDB models, the pipeline's page (docs/pipeline.md) and the API reference (docs/api-reference.md).
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) generate ./internal/...
	log=$$(mktemp) && $(GO) tool crd-ref-docs --source-path=./api/v1alpha1 --config=hack/crd-ref-docs.yaml \
		--renderer=markdown --output-path=docs/api-reference.md > $$log 2>&1 || { cat $$log; rm -f $$log; exit 1; }; rm -f $$log

.PHONY: manifests
manifests: ## Generate CRDs (config/crd) and RBAC roles (config/rbac) from the markers; copy ClusterNetworkPolicy's CRD from the pinned network-policy-api module.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	install -m 0644 "$$($(GO) list -m -f '{{.Dir}}' $(NETWORK_POLICY_API))/config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml" config/crd/bases/
	$(CONTROLLER_GEN) rbac:roleName=winnet-agent paths=./internal/agent/... output:rbac:artifacts:config=config/rbac/agent
	$(CONTROLLER_GEN) rbac:roleName=winnet-controller paths=./internal/controller/... output:rbac:artifacts:config=config/rbac/controller
	$(CONTROLLER_GEN) rbac:roleName=winnet-metrics-auth paths=./internal/metricsauth/... output:rbac:artifacts:config=config/rbac/metrics-auth
	@$(MAKE) --no-print-directory helm-crds

HELM_CRDS := config/helm/winnet/crds
# ClusterNetworkPolicy's CRD is the release's own (its experimental channel: nodes, domainNames and
# named ports too), at the version go.mod pins.
NETWORK_POLICY_API := sigs.k8s.io/network-policy-api
HELM_VERSION := v3.22.0

.PHONY: helm-crds
helm-crds: ## Copy the generated CRDs into the Helm chart (config/helm/winnet/crds); part of manifests.
	mkdir -p $(HELM_CRDS)
	rm -f $(HELM_CRDS)/*.yaml
	cp config/crd/bases/*.yaml $(HELM_CRDS)/

.PHONY: fmt
fmt: ## Run gofmt on the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: verify
verify: ## Regenerate code and manifests and fail if anything changed; check gofmt; check the builds for known vulnerabilities.
	hack/verify-generated.sh
	@$(MAKE) --no-print-directory vulncheck

.PHONY: vulncheck
vulncheck: ## govulncheck the linux and windows builds against golang.org/x/vulndb (built into bin/); fails on a called advisory that hack/vulncheck-allow.yaml does not allow.
	hack/vulncheck.sh

.PHONY: vet
vet: ## go vet for linux and windows (the test-only module test/netpol too), and the upgrade and soak tests (build tags).
	$(foreach os,$(PLATFORMS),GOOS=$(os) $(GO) vet ./... && (cd $(NETPOL_MODULE) && GOOS=$(os) $(GO) vet ./...) &&) true
	$(GO) vet -tags upgrade,soak ./test/upgrade/...

.PHONY: helm-lint
helm-lint: test-deps ## Lint the Helm chart with the helm that test-deps builds into bin/.
	$(BIN)/helm-$(HELM_VERSION)/helm lint --strict config/helm/winnet

##@ Build

.PHONY: build
build: ## Build the three binaries for linux and windows into bin/ (bin/windows/ is what the Windows image ships).
	$(foreach os,$(PLATFORMS),GOOS=$(os) $(GO) build -o $(BIN)/$(os)/ ./cmd/... &&) true

##@ Test

.PHONY: test-deps
test-deps: ## Install the test dependencies (Debian packages, kube-apiserver and etcd built into bin/).
	hack/setup-test-deps.sh

.PHONY: kubelet-deps
kubelet-deps: test-deps ## Build kubelet, kube-scheduler, containerd 2.x, the test images and Kubernetes' e2e.test into bin/ for the nodes with a real kubelet (make test; not make demo).
	hack/setup-kubelet-deps.sh

.PHONY: test
test: test-deps kubelet-deps verify vet build test-windows e2e-conformance-sample ## Run unit, API (real kube-apiserver) and OVS (real Open vSwitch) tests, the e2e tests of nodes with a real kubelet and containerd, a sample of Kubernetes' own sig-network conformance tests, the Windows test binaries under Wine, and a sample of the cyclonus NetworkPolicy cases; needs root.
	$(GO) test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory conformance-netpol-sample

.PHONY: test-windows
test-windows: test-deps ## Build the Windows test binaries of test/wine/packages.txt and run them under Wine (Debian's wine64); prints the tests it cannot run there, from test/wine/skips.txt, with their reasons.
	@hack/setup-wine.sh >/dev/null
	$(GO) run ./test/wine/run

.PHONY: previous-release
previous-release: ## Build the previous release (hack/previous-release) from the git history into bin/release-<version>-<commit>/ (src/, linux/ binaries; cached by a stamp) for the upgrade and skew tests; prints the directory.
	@hack/build-previous-release.sh

# CONFORMANCE_PACKAGE runs Kubernetes' own e2e.test (built by kubelet-deps) against winnet nodes with real
# kubelets; its tests build only with the tag conformance, so go test ./... does not run them.
CONFORMANCE_PACKAGE := ./test/e2e/conformance/
# The network-policy-api conformance features winnet declares (make conformance-cnp).
CNP_FEATURES ?= ClusterNetworkPolicy,ClusterNetworkPolicyNamedPorts,ClusterNetworkPolicyEgressNodePeers
CONFORMANCE_PROCS ?= 3
# CONFORMANCE_DUALSTACK=1 runs make conformance-k8s (and conformance-cnp) on a dual-stack cluster.
CONFORMANCE_DUALSTACK ?=
CONFORMANCE_DUALSTACK_ARG = $(if $(CONFORMANCE_DUALSTACK),-conformance.dualstack)

.PHONY: e2e-conformance-sample
e2e-conformance-sample: kubelet-deps build ## Run a small sample of Kubernetes' [sig-network] [Conformance] tests (stock e2e.test) on two winnet nodes with real kubelets (part of make test; needs root).
	@mkdir -p bin
	$(GO) test -tags conformance -count=1 -timeout 20m -run '^TestConformance$$' -v $(CONFORMANCE_PACKAGE) > $(BIN)/conformance-sample.log 2>&1 || { grep -E '^conformance-sample|conformance_linux_test.go' $(BIN)/conformance-sample.log | tail -60; echo "the conformance sample failed; logs in bin/conformance-sample.log and bin/conformance-sample.e2e.log"; exit 1; }
	@grep -E '^conformance-sample passed=' $(BIN)/conformance-sample.log

.PHONY: conformance-cnp
conformance-cnp: kubelet-deps build ## Run the network-policy-api v0.3.0 conformance suite (ClusterNetworkPolicy, Admin and Baseline tiers) on winnet nodes with real kubelets; test/e2e/conformance/cnp-skips.txt names what is skipped and why; report in bin/conformance-cnp/ (needs root).
	hack/setup-kubelet-deps.sh cnp >/dev/null
	$(GO) test -tags conformance -count=1 -timeout 90m -run '^TestConformanceCNP$$' -v $(CONFORMANCE_PACKAGE) -args -cnp.features=$(CNP_FEATURES) $(CONFORMANCE_DUALSTACK_ARG) > $(BIN)/conformance-cnp.log 2>&1 || { grep -E '^conformance-cnp|cnp_linux_test.go' $(BIN)/conformance-cnp.log | tail -80; echo "logs in bin/conformance-cnp.log and bin/conformance-cnp.suite.log"; }
	@grep -E '^conformance-cnp passed=' $(BIN)/conformance-cnp.log
	@grep -qE '^conformance-cnp passed=[1-9][0-9]* failed=0 ' $(BIN)/conformance-cnp.log

.PHONY: conformance-k8s
conformance-k8s: kubelet-deps build ## Run every Kubernetes [sig-network] [Conformance] and [Feature:NetworkPolicy] test, [LinuxOnly] included, but those test/e2e/conformance/skips.txt names, on winnet nodes with real kubelets; JUnit in bin/conformance-k8s/; CONFORMANCE_DUALSTACK=1 runs it on a dual-stack cluster (needs root).
	@mkdir -p bin
	$(GO) test -tags conformance -count=1 -timeout 100m -run '^TestConformance$$' -v $(CONFORMANCE_PACKAGE) -args -conformance.all -conformance.procs=$(CONFORMANCE_PROCS) -conformance.timeout=80m $(CONFORMANCE_DUALSTACK_ARG) > $(BIN)/conformance-k8s.log 2>&1 || { grep -E '^conformance-k8s|conformance_linux_test.go' $(BIN)/conformance-k8s.log | tail -80; echo "logs in bin/conformance-k8s.log and bin/conformance-k8s.e2e.log"; }
	@grep -E '^conformance-k8s passed=' $(BIN)/conformance-k8s.log
	@grep -qE '^conformance-k8s passed=[1-9][0-9]* failed=0 ' $(BIN)/conformance-k8s.log

.PHONY: conformance-netpol-sample
conformance-netpol-sample: ## The fixed sample of cyclonus NetworkPolicy cases that make test runs (needs root).
	@mkdir -p bin
	cd $(NETPOL_MODULE) && $(GO) test $(GO_TEST_FLAGS) -v . > $(BIN)/conformance-netpol-sample.log 2>&1 || { grep -E '^(case |conformance-netpol|    [a-z_]+\.go:[0-9]+: )' $(BIN)/conformance-netpol-sample.log | tail -60; echo "make test: the cyclonus sample failed; full log in bin/conformance-netpol-sample.log"; exit 1; }
	@grep '^conformance-netpol ' $(BIN)/conformance-netpol-sample.log
	@grep -q '^conformance-netpol cases=[1-9]' $(BIN)/conformance-netpol-sample.log || { echo "make test: the cyclonus sample ran no case"; exit 1; }

.PHONY: conformance-netpol
conformance-netpol: test-deps ## Play every non-SCTP cyclonus NetworkPolicy case (216) on two simulated nodes with real packets (needs root; about 30 min).
	@mkdir -p bin
	cd $(NETPOL_MODULE) && $(GO) test -count=1 -timeout 90m -run '^TestConformance$$' -v . -args -netpol.all > $(BIN)/conformance-netpol.log 2>&1 || { grep -E '^(case |conformance-netpol|    [a-z_]+\.go:[0-9]+: )' $(BIN)/conformance-netpol.log | grep -v ' 0 disagree' | tail -80; exit 1; }
	@grep -E '^conformance-netpol ' $(BIN)/conformance-netpol.log
	@grep -q '^conformance-netpol cases=[1-9]' $(BIN)/conformance-netpol.log || { echo "conformance-netpol ran no case"; exit 1; }

# UPGRADE_SKEW_HOLD is how long make test-upgrade holds each version skew (controller and agents of two releases).
UPGRADE_SKEW_HOLD ?= 5m

.PHONY: test-upgrade
test-upgrade: kubelet-deps build previous-release ## Upgrade the previous release's cluster (hack/previous-release) to this tree's and roll it back under live traffic, restart every agent (SIGTERM, SIGKILL), hold each version skew UPGRADE_SKEW_HOLD (5m); one line per phase (needs root; about 20 min).
	@mkdir -p bin
	export WINNET_PREVIOUS_RELEASE_DIR=$$(hack/build-previous-release.sh | tail -1); \
	$(GO) test -tags upgrade -count=1 -timeout 20m -v ./test/upgrade/cniskew/ > bin/test-upgrade-cniskew.log 2>&1 || { tail -40 bin/test-upgrade-cniskew.log; exit 1; }; \
	grep -E '^(--- |ok|PASS)' bin/test-upgrade-cniskew.log; \
	WINNET_UPGRADE_SKEW_HOLD=$(UPGRADE_SKEW_HOLD) $(GO) test -tags upgrade -count=1 -timeout 60m -run '^TestUpgrade$$' -v ./test/upgrade/ > bin/test-upgrade.log 2>&1 || { grep -E '^test-upgrade|_test.go:[0-9]+:' bin/test-upgrade.log | tail -80; echo "logs in bin/test-upgrade.log"; exit 1; }
	@grep -E '^test-upgrade' bin/test-upgrade.log

# SOAK_MINUTES is make soak's length; SOAK_RATE the short-lived Pods it starts a second at most.
SOAK_MINUTES ?= 120
SOAK_RATE ?= 0.5

.PHONY: soak
soak: kubelet-deps build ## The upgrade test's cluster (real kubelets) under ordinary churn for SOAK_MINUTES (120): Pods, rollouts, policies, traces, traffic; samples every 30 s into bin/soak/ (samples.csv, a picture per quantity); one `soak` line (needs root; SOAK_MINUTES=10 to try it).
	@mkdir -p bin/soak
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_RATE=$(SOAK_RATE) $(GO) test -tags soak -count=1 -timeout $$(awk 'BEGIN{print int($(SOAK_MINUTES))+45}')m -run '^TestSoak$$' -v ./test/upgrade/ > bin/soak.log 2>&1 || { grep -E '^soak|_test.go:[0-9]+:' bin/soak.log | tail -80; echo "logs in bin/soak.log"; exit 1; }
	@grep -E '^soak ' bin/soak.log

CHAOS_ROUNDS ?= 200

.PHONY: test-chaos
test-chaos: test-deps build ## Kill winnet-agent, ovs-vswitchd and ovsdb-server (SIGKILL) at random moments while Pods are ADDed/DELed at concurrency 8, CHAOS_ROUNDS rounds (200); prints the leak table (needs root).
	@mkdir -p bin
	WINNET_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(GO) test -count=1 -timeout 180m -run '^TestChaos$$' -v ./test/chaos/ > bin/test-chaos.log 2>&1 || { grep -E '^round |chaos_test.go' bin/test-chaos.log | tail -40; tail -5 bin/test-chaos.log; exit 1; }
	@sed -n 's/^chaos-table //p' bin/test-chaos.log
	@grep '^test-chaos ' bin/test-chaos.log

.PHONY: bench-routes
bench-routes: test-deps ## Benchmark remote routes at 1,000/5,000/10,000 nodes against ovs-ofctl (needs root).
	$(GO) test -tags bench -count=1 -timeout 30m -run '^TestBenchRoutes$$' -v ./test/bench/routes/ > bin/bench-routes.log 2>&1 || { tail -50 bin/bench-routes.log; exit 1; }
	@grep '^bench-routes ' bin/bench-routes.log

.PHONY: bench-host-routes
bench-host-routes: ## Benchmark the simulated host's routing table at 5,000 routes: installing (batched against one request per route), deleting stale ones (batched against one listing per route), listing (bytes allocated, against netlink's slice listing) (needs root).
	@mkdir -p bin
	$(GO) test -count=1 -run XXX -bench '^Benchmark(EnsureRoutes|ReconcileRoutes|Routes)5000$$' -benchtime 5x ./internal/hostnet/ > bin/bench-host-routes.log 2>&1 || { tail -30 bin/bench-host-routes.log; exit 1; }
	@grep '^Benchmark' bin/bench-host-routes.log

.PHONY: bench-cni
bench-cni: test-deps ## Benchmark 200 Pods' CNI ADD+DEL at concurrency 1 and 8 against the floor (the same veth, OVS port and flows without winnet), then 8 with simulated HNS latency for information (needs root).
	@mkdir -p bin
	$(GO) test -tags bench -count=1 -timeout 20m -run '^TestBenchCNI$$' -v ./test/bench/cni/ > bin/bench-cni.log 2>&1 || { tail -50 bin/bench-cni.log; exit 1; }
	@grep '^bench-cni ' bin/bench-cni.log

.PHONY: bench-netpol
bench-netpol: test-deps ## Benchmark NetworkPolicy realisation: 5,000 ipBlock rules against ovs-ofctl, 0.0.0.0/0 except 4,000 /32s (flows, ovs-ofctl, the agent's CPU after), 1,000 policies on 200 Pods, one added address (needs root).
	@mkdir -p bin
	$(GO) test -tags bench -count=1 -timeout 30m -run '^TestBenchNetpol$$' -v ./test/bench/netpol/ > bin/bench-netpol.log 2>&1 || { tail -50 bin/bench-netpol.log; exit 1; }
	@grep -E '^bench-netpol(-except|-counters)? ' bin/bench-netpol.log

.PHONY: bench-audit
bench-audit: test-deps ## Benchmark the audit log: 200 and 1,000 new connections/s through an audited NetworkPolicy rule against the same with the log off (agent and ovs-vswitchd CPU, packet-ins, lines, dropped), and another audited namespace's lines per connection alone and during a 1,000/s flood in the first; BENCH_AUDIT_RATE=N raises the log's limit to N lines/s (needs root, 3 min).
	@mkdir -p bin
	$(GO) test -tags bench -count=1 -timeout 10m -run '^TestBenchAudit(Fairness)?$$' -v ./test/bench/audit/ > bin/bench-audit.log 2>&1 || { tail -50 bin/bench-audit.log; exit 1; }
	@grep '^bench-audit' bin/bench-audit.log

.PHONY: bench-services
bench-services: ## Benchmark Services (10,000 x 5 endpoints; cold, one endpoint added, churn) against kube-proxy's nftables mode, which it builds (needs root).
	hack/setup-test-deps.sh kube-proxy
	@mkdir -p bin
	$(GO) test -tags bench -count=1 -timeout 60m -run '^TestBenchServices$$' -v ./test/bench/services/ > bin/bench-services.log 2>&1 || { tail -50 bin/bench-services.log; exit 1; }
	@grep '^bench-services ' bin/bench-services.log

.PHONY: bench-scale
bench-scale: test-deps build ## Grow one cluster 10k -> 30k -> 60k Pods with 3 real agents (and 3 of BENCH_SCALE_REF_BIN's build beside them), winnet-controller and the real API server; measure the agents and winnet-controller at each size (needs root; 30-45 min). BENCH_SCALE_150K=1 adds 150k on 5,000 Nodes (the full shape); BENCH_SCALE_150K=1 BENCH_SCALE_FIXED=1 grows only Pods, 30k -> 60k -> 150k on 1,000 Nodes (each 45 min or more, machine alone).
	@mkdir -p bin
	$(GO) test -tags bench -count=1 -timeout 150m -run '^TestBenchScale$$' -v ./test/bench/scale/ > bin/bench-scale.log 2>&1 || { grep -E '^bench-scale|_test.go:[0-9]' bin/bench-scale.log | tail -40; tail -20 bin/bench-scale.log; exit 1; }
	@grep '^bench-scale-info' bin/bench-scale.log
	@sed -n '/^bench-scale-info: the run took/,$$p' bin/bench-scale.log | grep -E '^bench-scale(-ref|-controller)? '

.PHONY: bench-ovs
bench-ovs: test-deps ## Benchmark flow installation against ovs-ofctl --bundle (needs root).
	@mkdir -p bin
	$(GO) run ./test/bench/ovs 2> bin/bench-ovs.log || { tail -30 bin/bench-ovs.log; exit 1; }

.PHONY: e2e-kubelet
e2e-kubelet: kubelet-deps build ## Run only the e2e tests of the nodes with a real kubelet and containerd (1.6 and 2.x); needs root.
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/kubelet/

.PHONY: e2e
e2e: test-deps build ## Run only the e2e suite (three simulated nodes, the connectivity matrix, dynamic scenarios) with its tables and numbers; needs root.
	$(GO) test -count=1 -timeout 10m -v ./test/e2e/

##@ Demo

DEMO_DIR := $(BIN)/demo

.PHONY: demo
demo: test-deps build ## Run a winnet cluster on this machine (two winnet nodes with two Pods each, the flannel node linux-a with one, an external host) and leave it running; needs root.
	$(GO) build -o $(DEMO_DIR)/winnet-demo ./test/e2e/demo
	$(DEMO_DIR)/winnet-demo up --dir $(DEMO_DIR)

.PHONY: docs-check
docs-check: demo ## Start the demo (README's quick start), check that docs/demo.md shows what it prints and that every command it tells you to try succeeds, then take it down.
	rc=0; $(GO) test -tags democheck -count=1 -timeout 15m -v -run '^TestDemoAsDocumented$$' ./test/docs/ -args -demo-dir $(abspath $(DEMO_DIR)) || rc=$$?; $(MAKE) --no-print-directory demo-down; exit $$rc

.PHONY: demo-down
demo-down: ## Stop the demo and remove everything it created (processes, namespaces, OVS instances, state).
	$(GO) build -o $(DEMO_DIR)/winnet-demo ./test/e2e/demo
	$(DEMO_DIR)/winnet-demo down --dir $(DEMO_DIR)
