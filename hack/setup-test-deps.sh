#!/usr/bin/env bash
# Installs everything `make test` needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages: those of every command on test/hostcmd's list (Open vSwitch on the userspace
#     datapath, CNI plugins, iproute2, nftables, ping, python3 for raw packets, iptables for flanneld,
#     wine64 and MinGW-w64's gcc for make test-windows, whose prefix hack/setup-wine.sh makes...)
#   - kube-apiserver, kube-controller-manager, kubectl and etcd built from the Go module proxy into
#     bin/k8s/<version>/ (cached by version)
#   - CoreDNS (a main with the plugins the e2e cluster's kube-dns uses) built from the Go module proxy
#     into bin/coredns-<version>/ (the e2e cluster and the demo run it as kube-system/kube-dns)
#   - flanneld built from the Go module proxy into bin/flannel-<version>/ (the e2e cluster's Linux
#     flannel node runs it; the Pods there use Debian's bridge and host-local CNI plugins)
#   - helm built from the Go module proxy (the tool in go.mod) into bin/helm-<version>/ (chart tests)
#   - with the argument `kube-proxy` (make bench-services only): also kube-proxy, built like
#     kube-apiserver into bin/k8s/<version>/
#   - with the argument `kubelet` (hack/setup-kubelet-deps.sh only): also kubelet and kube-scheduler,
#     built like kube-apiserver into bin/k8s/<version>/
#   - with the argument `e2e` (hack/setup-kubelet-deps.sh only): also Kubernetes' own e2e suite, the
#     stock `e2e.test` (`go test -c -vet=off k8s.io/kubernetes/test/e2e` in the same throwaway module)
#     and the ginkgo CLI it is built with (its parallel runs) into bin/e2e-<version>/ (make conformance-k8s
#     and its sample in make test run them)
# Run as root. Safe to run again: every step checks before it acts.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBE_VERSION=${KUBE_VERSION:-v1.37.0}
STAGING_VERSION=${STAGING_VERSION:-v0.37.0}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
FLANNEL_VERSION=${FLANNEL_VERSION:-v0.28.10}
ASSETS="$ROOT/bin/k8s/$KUBE_VERSION-etcd-$ETCD_VERSION"
export GOTOOLCHAIN=local
export GOFLAGS=-mod=mod
WITH_KUBE_PROXY=0
WITH_KUBELET=0
WITH_E2E=0
for arg in "$@"; do
	case $arg in
	kube-proxy) WITH_KUBE_PROXY=1 ;;
	kubelet) WITH_KUBELET=1 ;;
	e2e) WITH_E2E=1 ;;
	*) echo "usage: $0 [kube-proxy] [kubelet] [e2e]" >&2; exit 2 ;;
	esac
done

log() { echo "setup-test-deps: $*" >&2; }

install_debian_packages() {
	local need=()
	# The commands tests, benchmarks and the demo run, with their Debian packages, are listed once, in
	# test/hostcmd/hostcmd.go (nftables among them: test/e2e/cluster runs nft in node namespaces).
	# shellcheck disable=SC2207
	need=($(cd "$ROOT" && go run ./test/hostcmd/check -packages))
	# Building flanneld needs gcc (its udp backend is cgo).
	[ -x "$ROOT/bin/flannel-$FLANNEL_VERSION/flanneld" ] || command -v gcc >/dev/null || need+=(gcc)
	if [ ${#need[@]} -eq 0 ]; then return; fi
	if [ "$(id -u)" != 0 ]; then
		log "missing Debian packages ${need[*]} and not root: run 'sudo $0' once"
		exit 1
	fi
	log "installing Debian packages: ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	# The package starts system-wide OVS daemons; tests start their own per test, so stop these.
	if command -v systemctl >/dev/null && systemctl is-active -q openvswitch-switch 2>/dev/null; then
		systemctl stop openvswitch-switch || true
	fi
}

# build_in_module DIR OUT PKG LDFLAGS: builds PKG in the throwaway module in DIR into OUT.
build_in_module() {
	local dir=$1 out=$2 pkg=$3 ldflags=$4
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
}

# KUBE_BINARIES are built from k8s.io/kubernetes in one throwaway module, so that each binary reuses
# the packages the others compiled (kube-controller-manager: EndpointSlices, ServiceAccount tokens and
# node lifecycle in the e2e cluster).
# kube-proxy (nftables mode, the reference of make bench-services) only when asked for: make test
# does not run it.
KUBE_BINARIES=(kube-apiserver kubectl kube-controller-manager)
[ "$WITH_KUBE_PROXY" = 1 ] && KUBE_BINARIES+=(kube-proxy)
# kubelet and kube-scheduler: the winnet nodes with a real kubelet (hack/setup-kubelet-deps.sh).
[ "$WITH_KUBELET" = 1 ] && KUBE_BINARIES+=(kubelet kube-scheduler)

KUBE_MODULE="$ROOT/bin/.build/kubernetes-$KUBE_VERSION"

# kube_ldflags: the version every Kubernetes binary built here reports (e2e.test checks the server's).
kube_ldflags() {
	local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		"-X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

# write_kube_module writes the throwaway module's go.mod (k8s.io/kubernetes and its staging modules
# pinned to their releases) unless it is there.
write_kube_module() {
	local mod=$KUBE_MODULE
	[ -f "$mod/go.mod" ] && return
	mkdir -p "$mod"
	go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null
	local kmod
	kmod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBE_VERSION.mod
	{
		printf 'module winnet.local/build/kubernetes\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
		# k8s.io/kubernetes replaces every staging module with a local path: pin each to its release.
		sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$kmod"
		echo ")"
	} >"$mod/go.mod"
	[ -f "$mod/go.sum" ] || : >"$mod/go.sum"
}

build_kube() {
	local missing=()
	for b in "${KUBE_BINARIES[@]}"; do [ -x "$ASSETS/$b" ] || missing+=("$b"); done
	[ ${#missing[@]} -eq 0 ] && return
	log "building ${missing[*]} $KUBE_VERSION from the Go module proxy (several minutes, once)"
	write_kube_module
	local mod=$KUBE_MODULE
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		for b in "${KUBE_BINARIES[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
		printf ')\n'
	} >"$mod/tools.go"
	local ldflags
	ldflags=$(kube_ldflags)
	export GONOSUMDB=k8s.io
	(cd "$mod" && go mod tidy >/dev/null)
	for b in "${missing[@]}"; do
		build_in_module "$mod" "$ASSETS/$b" "k8s.io/kubernetes/cmd/$b" "$ldflags"
	done
	unset GONOSUMDB
}

# build_e2e_test builds Kubernetes' e2e suite as its CI does (a test binary of k8s.io/kubernetes/test/e2e)
# in the throwaway module, whose go.mod keeps the suite's requirements through a tools file of the
# packages e2e_test.go imports (tests of a dependency are not in `go mod tidy`'s graph).
build_e2e_test() {
	local out="$ROOT/bin/e2e-$KUBE_VERSION/e2e.test" cli="$ROOT/bin/e2e-$KUBE_VERSION/ginkgo"
	[ -x "$out" ] && [ -x "$cli" ] && return
	log "building e2e.test $KUBE_VERSION from the Go module proxy (several minutes, once)"
	write_kube_module
	local mod=$KUBE_MODULE src
	src=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		sed -n 's#^[[:space:]]*\([a-z0-9_]* \)\{0,1\}"\([a-z0-9-]*\.[a-z]*/[^"]*\)"$#\t_ "\2"#p' "$src/test/e2e/e2e_test.go" | sort -u
		printf '\t_ "k8s.io/kubernetes/test/e2e"\n\t_ "github.com/onsi/ginkgo/v2/ginkgo"\n)\n'
	} >"$mod/tools_e2e.go"
	mkdir -p "$(dirname "$out")"
	(cd "$mod" && GONOSUMDB=k8s.io go mod tidy >/dev/null)
	if [ ! -x "$out" ]; then
		(cd "$mod" && go test -c -vet=off -trimpath -ldflags "$(kube_ldflags)" -o "$out.tmp" k8s.io/kubernetes/test/e2e)
		mv "$out.tmp" "$out"
	fi
	# The ginkgo CLI from the same module, so of the ginkgo e2e.test is built with: it runs the suite in
	# parallel processes. (Run from a directory of another module, it warns of that module's version.)
	build_in_module "$mod" "$cli" github.com/onsi/ginkgo/v2/ginkgo "-s -w"
}

build_etcd() {
	local out="$ASSETS/etcd"
	[ -x "$out" ] && return
	log "building etcd $ETCD_VERSION from the Go module proxy (a minute or two, once)"
	local mod="$ROOT/bin/.build/etcd-$ETCD_VERSION"
	mkdir -p "$mod"
	printf 'module winnet.local/build/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$mod/go.mod"
	: >"$mod/go.sum"
	printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$mod/tools.go"
	(cd "$mod" && go mod tidy >/dev/null 2>&1 || go get go.etcd.io/etcd/server/v3)
	build_in_module "$mod" "$out" go.etcd.io/etcd/server/v3 "-s -w"
}

# build_helm builds the helm pinned as a tool in go.mod (go get -tool helm.sh/helm/v3/cmd/helm@VERSION).
build_helm() {
	local out="$ROOT/bin/helm-$HELM_VERSION/helm"
	[ -x "$out" ] && return
	log "building helm $HELM_VERSION from the Go module proxy (a few minutes, once)"
	mkdir -p "$(dirname "$out")"
	# Like helm's own Makefile: the default Kubernetes version of `helm template` and `helm lint` is
	# the one of the client-go it is built with (else v1.20, below the chart's kubeVersion).
	local kminor ldflags
	kminor=$(cd "$ROOT" && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
	ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
	for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
		ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kminor"
	done
	(cd "$ROOT" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" helm.sh/helm/v3/cmd/helm)
	mv "$out.tmp" "$out"
}

# build_coredns builds CoreDNS with only the plugins the e2e cluster's Corefile uses: a main that
# imports coremain and sets the directive list, as CoreDNS documents for custom builds (plugin.cfg
# order), instead of the full binary with every cloud provider's plugin.
COREDNS_PLUGINS=(ready health errors log cache kubernetes loop forward)

build_coredns() {
	local out="$ROOT/bin/coredns-$COREDNS_VERSION/coredns"
	[ -x "$out" ] && return
	log "building coredns $COREDNS_VERSION from the Go module proxy (a minute or two, once)"
	mkdir -p "$(dirname "$out")"
	local mod="$ROOT/bin/.build/coredns-$COREDNS_VERSION"
	mkdir -p "$mod"
	printf 'module winnet.local/build/coredns\n\ngo 1.26\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" >"$mod/go.mod"
	[ -f "$mod/go.sum" ] || : >"$mod/go.sum"
	{
		printf '// Command coredns is CoreDNS with the plugins winnet'"'"'s e2e cluster uses.\npackage main\n\nimport (\n'
		printf '\t"github.com/coredns/coredns/core/dnsserver"\n\t"github.com/coredns/coredns/coremain"\n\n'
		for p in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
		printf ')\n\nfunc init() {\n\tdnsserver.Directives = []string{\n'
		for p in "${COREDNS_PLUGINS[@]}"; do printf '\t\t"%s",\n' "$p"; done
		printf '\t}\n}\n\nfunc main() { coremain.Run() }\n'
	} >"$mod/main.go"
	(cd "$mod" && go mod tidy >/dev/null)
	build_in_module "$mod" "$out" . "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION"
}

# build_flanneld builds stock flanneld from a copy of its module with one blank import left out:
# pkg/backend/tencentvpc needs github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc, which the
# module proxy here refuses (403), so `go install github.com/flannel-io/flannel@VERSION` cannot work.
# Every other backend (vxlan among them) is the released code. The udp backend is cgo (CGO_ENABLED=1).
build_flanneld() {
	local out="$ROOT/bin/flannel-$FLANNEL_VERSION/flanneld"
	[ -x "$out" ] && return
	log "building flanneld $FLANNEL_VERSION from the Go module proxy (about 4 minutes, once)"
	mkdir -p "$(dirname "$out")"
	local src
	src=$(go mod download -json "github.com/flannel-io/flannel@$FLANNEL_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	local mod="$ROOT/bin/.build/flannel-$FLANNEL_VERSION"
	rm -rf "$mod"
	mkdir -p "$(dirname "$mod")"
	cp -r "$src" "$mod"
	chmod -R u+w "$mod"
	rm -rf "$mod/pkg/backend/tencentvpc"
	sed -i '\#_ "github.com/flannel-io/flannel/pkg/backend/tencentvpc"#d' "$mod/main.go"
	(cd "$mod" && CGO_ENABLED=1 go build -trimpath -o "$out.tmp" \
		-ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" .)
	mv "$out.tmp" "$out"
}

install_debian_packages
mkdir -p "$ASSETS"
build_etcd
build_kube
build_helm
build_coredns
build_flanneld
"$ROOT/bin/helm-$HELM_VERSION/helm" version --short >/dev/null
"$ASSETS/kube-apiserver" --version >/dev/null
"$ASSETS/etcd" --version >/dev/null
"$ASSETS/kubectl" version --client >/dev/null
"$ASSETS/kube-controller-manager" --version >/dev/null
if [ "$WITH_KUBE_PROXY" = 1 ]; then "$ASSETS/kube-proxy" --version >/dev/null; fi
if [ "$WITH_KUBELET" = 1 ]; then "$ASSETS/kubelet" --version >/dev/null && "$ASSETS/kube-scheduler" --version >/dev/null; fi
if [ "$WITH_E2E" = 1 ]; then
	build_e2e_test
	"$ROOT/bin/e2e-$KUBE_VERSION/e2e.test" --help >/dev/null 2>&1
	"$ROOT/bin/e2e-$KUBE_VERSION/ginkgo" version >/dev/null
fi
# Every command on the list is here, or this fails now, naming each missing one and its package.
(cd "$ROOT" && go run ./test/hostcmd/check >&2)
"$ROOT/bin/coredns-$COREDNS_VERSION/coredns" -plugins >/dev/null
"$ROOT/bin/flannel-$FLANNEL_VERSION/flanneld" --version >/dev/null 2>&1
echo "$ASSETS"
