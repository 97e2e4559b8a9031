#!/usr/bin/env bash
# Builds and caches by version what the winnet nodes with a real kubelet and containerd need
# (test/framework/kubeletnode; make test calls this script, make demo does not):
#   - kubelet and kube-scheduler: hack/setup-test-deps.sh kubelet (the same throwaway module and
#     ldflags as kube-apiserver) into bin/k8s/<version>/
#   - containerd 2.x (containerd, its runc shim containerd-shim-runc-v2, ctr) built from the Go module
#     proxy with -tags no_btrfs into bin/containerd-<version>/; containerd 1.6 and runc are Debian's
#     (test/hostcmd's list, installed by hack/setup-test-deps.sh)
#   - the test images as OCI archives named exactly as e2e.test of the Kubernetes version names them
#     (test/utils/image/manifest.go), into bin/images-<kube version>/: pause (Kubernetes'
#     build/pause/linux/pause.c, gcc -static) and agnhost (k8s.io/kubernetes/test/images/agnhost) on a
#     root filesystem of this machine's Debian binaries (dash as /bin/sh, bash, curl, nc, dig) with the
#     libraries ldd names. Nothing is ever pulled: the harness imports them into each containerd.
# Run as root. Safe to run again: every step checks before it acts. Prints the directories it built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBE_VERSION=${KUBE_VERSION:-v1.37.0}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
# The image tags of e2e.test $KUBE_VERSION (test/utils/image/manifest.go); checked against the
# module's manifest.go below, so a new Kubernetes version fails here rather than pulling.
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.66.1
# Stand-ins for the other images the sig-network suites run (make conformance-k8s), on a root filesystem
# of this machine's tools: glibc-dns-testing (the DNS tests' glibc querier: sh, dig, getent), nginx (an
# HTTP server on port 80: nc in a loop) and busybox (sh and the usual commands).
GLIBC_DNS_IMAGE=registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1
NGINX_IMAGE=registry.k8s.io/e2e-test-images/nginx:1.27.0-2
BUSYBOX_IMAGE=registry.k8s.io/e2e-test-images/busybox:1.37.0-2
IMAGES="$ROOT/bin/images-$KUBE_VERSION"
# IMAGES_REVISION changes with the images' recipe below (2: merged /usr, so /bin/sh is found; 3: the
# stand-ins; 4: porter's TLS certificate in agnhost; 5: seq, head and the others in agnhost; 6: the
# network-policy-api suite's agnhost).
IMAGES_REVISION=6
# The agnhost the network-policy-api conformance suite names (make conformance-cnp): built from the same
# source as AGNHOST_IMAGE, with one change: porter logs and goes on when it cannot listen on an SCTP port
# (upstream it exits, and this kernel has no SCTP, so no server Pod of the suite would ever run). Not in
# images.txt: only the suite's cluster imports it (cnp-images.txt).
CNP_AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.45
# The network-policy-api release whose conformance suite make conformance-cnp runs.
NPAPI_VERSION=${NPAPI_VERSION:-v0.3.0}
export GOTOOLCHAIN=local
export GOFLAGS=-mod=mod

log() { echo "setup-kubelet-deps: $*" >&2; }

build_containerd() {
	local out="$ROOT/bin/containerd-$CONTAINERD_VERSION"
	local bins=(containerd containerd-shim-runc-v2 ctr) missing=()
	for b in "${bins[@]}"; do [ -x "$out/$b" ] || missing+=("$b"); done
	[ ${#missing[@]} -eq 0 ] && return
	log "building containerd $CONTAINERD_VERSION (${missing[*]}) from the Go module proxy (a few minutes, once)"
	local mod="$ROOT/bin/.build/containerd-$CONTAINERD_VERSION"
	mkdir -p "$mod" "$out"
	printf 'module winnet.local/build/containerd\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' "$CONTAINERD_VERSION" >"$mod/go.mod"
	[ -f "$mod/go.sum" ] || : >"$mod/go.sum"
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		for b in "${bins[@]}"; do printf '\t_ "github.com/containerd/containerd/v2/cmd/%s"\n' "$b"; done
		printf ')\n'
	} >"$mod/tools.go"
	(cd "$mod" && go mod tidy >/dev/null)
	local ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
	for b in "${missing[@]}"; do
		(cd "$mod" && go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$out/$b.tmp" "github.com/containerd/containerd/v2/cmd/$b")
		mv "$out/$b.tmp" "$out/$b"
	done
}

kube_src() {
	go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

check_image_names() {
	local manifest
	manifest="$(kube_src)/test/utils/image/manifest.go"
	grep -q "configs\[Pause\] = Config{list.GcRegistry, \"pause\", \"${PAUSE_IMAGE##*:}\"}" "$manifest" ||
		{ log "$manifest does not name $PAUSE_IMAGE: update PAUSE_IMAGE"; exit 1; }
	grep -q "configs\[Agnhost\] = Config{list.PromoterE2eRegistry, \"agnhost\", \"${AGNHOST_IMAGE##*:}\"}" "$manifest" ||
		{ log "$manifest does not name $AGNHOST_IMAGE: update AGNHOST_IMAGE"; exit 1; }
	local ref key
	for ref in "GlibcDnsTesting $GLIBC_DNS_IMAGE" "Nginx $NGINX_IMAGE" "BusyBox $BUSYBOX_IMAGE"; do
		key=${ref%% *} ref=${ref#* }
		local name=${ref##*/}
		grep -q "configs\[$key\] = Config{list.PromoterE2eRegistry, \"${name%%:*}\", \"${name##*:}\"}" "$manifest" ||
			{ log "$manifest does not name $ref: update it"; exit 1; }
	done
}

# copy_with_libs ROOTFS BINARY...: copies each binary and the shared libraries ldd lists for it.
copy_with_libs() {
	local rootfs=$1; shift
	local f lib
	for f in "$@"; do
		f=$(readlink -f "$f")
		mkdir -p "$rootfs$(dirname "$f")"
		cp -n "$f" "$rootfs$f"
		for lib in $(ldd "$f" | grep -o '/[^ ]*'); do
			mkdir -p "$rootfs$(dirname "$lib")"
			cp -nL "$lib" "$rootfs$lib"
		done
	done
}

build_images() {
	local pause_tar="$IMAGES/pause.tar" agnhost_tar="$IMAGES/agnhost.tar"
	# images.txt names the recipe's revision: images built by an older recipe are built again.
	[ -s "$pause_tar" ] && [ -s "$agnhost_tar" ] && [ -s "$IMAGES/agnhost-2.45.tar" ] && grep -qx "revision $IMAGES_REVISION" "$IMAGES/images.txt" 2>/dev/null && return
	check_image_names
	log "building the images $PAUSE_IMAGE, $AGNHOST_IMAGE and the stand-ins (a minute, once)"
	local src work
	src=$(kube_src)
	work="$ROOT/bin/.build/images-$KUBE_VERSION"
	rm -rf "$work"
	mkdir -p "$work/pause/rootfs" "$work/agnhost/rootfs" "$IMAGES"

	# gcc -static needs libc.a, which gcc only recommends.
	if [ ! -f /usr/lib/x86_64-linux-gnu/libc.a ]; then
		log "installing libc6-dev (gcc -static of pause)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libc6-dev >/dev/null
	fi
	gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE_IMAGE##*:}-winnet" -o "$work/pause/rootfs/pause" "$src/build/pause/linux/pause.c"
	(cd "$ROOT" && go run ./hack/ociimage -name "$PAUSE_IMAGE" -root "$work/pause/rootfs" -out "$pause_tar" -entrypoint /pause)

	# agnhost: built in the throwaway module of the Kubernetes binaries (hack/setup-test-deps.sh),
	# with its own tools file so that module's go.mod keeps agnhost's requirements, and like them with
	# cgo (their build cache serves most of it): the libraries it links go into the image below.
	local mod="$ROOT/bin/.build/kubernetes-$KUBE_VERSION"
	printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/test/images/agnhost"\n' >"$mod/tools_agnhost.go"
	(cd "$mod" && GONOSUMDB=k8s.io go mod tidy >/dev/null &&
		go build -trimpath -ldflags "-s -w" -o "$work/agnhost/rootfs/agnhost" k8s.io/kubernetes/test/images/agnhost)
	local r="$work/agnhost/rootfs"
	ln -s agnhost "$r/agnhost-2"
	# Merged /usr, as the machine's (Debian 12): the binaries copied below are found at the paths ldd and
	# readlink give (/usr/bin/dash) and at the ones e2e.test runs (/bin/sh).
	mkdir -p "$r/usr/bin" "$r/usr/sbin" "$r/usr/lib" "$r/usr/lib64" "$r/etc" "$r/tmp" "$r/uploads" "$r/root"
	for d in bin sbin lib lib64; do ln -s "usr/$d" "$r/$d"; done
	chmod 1777 "$r/tmp"
	# The commands the suites' shell lines use, as alpine's busybox gives them to the real image (the DNS
	# tests' probe loops: seq, getent, grep; the others' head, wc, cut...).
	copy_with_libs "$r" /bin/dash /bin/bash /usr/bin/curl /bin/nc.openbsd /usr/bin/dig /usr/bin/nslookup \
		/bin/ls /bin/cat /bin/sleep /bin/echo /bin/hostname /bin/ip /usr/bin/timeout \
		/usr/bin/seq /usr/bin/getent /bin/grep /bin/sed /usr/bin/head /usr/bin/tail /usr/bin/wc /usr/bin/cut \
		/usr/bin/sort /usr/bin/tr /usr/bin/test /bin/mkdir /bin/rm /bin/touch /bin/date /usr/bin/env /usr/bin/awk \
		/bin/ps /usr/bin/id /bin/mv /bin/cp /bin/ln /usr/bin/tee
	for lib in $(ldd "$r/agnhost" | grep -o '/[^ ]*'); do
		mkdir -p "$r$(dirname "$lib")"
		cp -nL "$lib" "$r$lib"
	done
	# e2e runs commands through /bin/sh -c, which must be dash: busybox's nc lacks -u.
	ln -sf /bin/dash "$r/bin/sh"
	[ -e "$r/bin/nc" ] || ln -s /bin/nc.openbsd "$r/bin/nc"
	[ -e "$r/usr/bin/awk" ] || ln -s "$(basename "$(readlink -f /usr/bin/awk)")" "$r/usr/bin/awk"
	printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/tmp:/bin/sh\n' >"$r/etc/passwd"
	printf 'root:x:0:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >"$r/etc/group"
	printf 'hosts: files dns\n' >"$r/etc/nsswitch.conf"
	# As agnhost's Dockerfile: porter serves TLS with these (the proxy tests' https: ports).
	cp "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$r/"
	(cd "$ROOT" && go run ./hack/ociimage -name "$AGNHOST_IMAGE" -root "$r" -out "$agnhost_tar" -entrypoint /agnhost -cmd pause)

	# The suite's agnhost: porter with SCTP listeners made non-fatal. Go builds no overlay of the module
	# cache, so agnhost's tree is copied into the throwaway module (its imports of itself rewritten to
	# the copy), porter.go changed there, built, and the copy removed.
	local porter="$src/test/images/agnhost/porter/porter.go" copy="$mod/agnhost_sctp_optional"
	grep -q 'log.Fatal("Failed to listen SCTP. error:", err)' "$porter" || {
		log "$porter no longer has the SCTP listen error this recipe makes non-fatal: update the recipe"
		exit 1
	}
	rm -rf "$copy"
	cp -r "$src/test/images/agnhost" "$copy"
	chmod -R u+w "$copy"
	find "$copy" -name '*.go' -exec sed -i 's#"k8s.io/kubernetes/test/images/agnhost/#"winnet.local/build/kubernetes/agnhost_sctp_optional/#' {} +
	sed -i 's/log.Fatal("Failed to listen SCTP. error:", err)/log.Print("Failed to listen SCTP (not served; winnet test image: this kernel has no SCTP). error:", err); return/' \
		"$copy/porter/porter.go"
	(cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$work/agnhost-sctp-optional" ./agnhost_sctp_optional)
	rm -rf "$copy"
	cp "$r/agnhost" "$work/agnhost-upstream"
	cp "$work/agnhost-sctp-optional" "$r/agnhost"
	(cd "$ROOT" && go run ./hack/ociimage -name "$CNP_AGNHOST_IMAGE" -root "$r" -out "$IMAGES/agnhost-2.45.tar" -entrypoint /agnhost -cmd pause)
	cp "$work/agnhost-upstream" "$r/agnhost"
	printf '%s agnhost-2.45.tar\n' "$CNP_AGNHOST_IMAGE" >"$IMAGES/cnp-images.txt"

	# The stand-ins: the same tools without agnhost.
	local t="$work/tools/rootfs"
	mkdir -p "$t"
	(cd "$r" && tar --exclude=./agnhost --exclude=./agnhost-2 -cf - .) | (cd "$t" && tar -xf -)
	(cd "$ROOT" && go run ./hack/ociimage -name "$GLIBC_DNS_IMAGE" -root "$t" -out "$IMAGES/glibc-dns-testing.tar" -cmd /bin/sh)
	(cd "$ROOT" && go run ./hack/ociimage -name "$BUSYBOX_IMAGE" -root "$t" -out "$IMAGES/busybox.tar" -cmd /bin/sh)
	(cd "$ROOT" && go run ./hack/ociimage -name "$NGINX_IMAGE" -root "$t" -out "$IMAGES/nginx.tar" -entrypoint /bin/sh,-c \
		-cmd 'while :; do printf "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n" | nc -N -l 80; done')
	{
		printf '%s pause.tar\n%s agnhost.tar\n' "$PAUSE_IMAGE" "$AGNHOST_IMAGE"
		printf '%s glibc-dns-testing.tar\n%s busybox.tar\n%s nginx.tar\n' "$GLIBC_DNS_IMAGE" "$BUSYBOX_IMAGE" "$NGINX_IMAGE"
		printf 'revision %s\n' "$IMAGES_REVISION"
	} >"$IMAGES/images.txt"
}

# build_cnp builds the network-policy-api conformance suite of NPAPI_VERSION as a test binary (its
# package's TestConformance, with the suite's manifests embedded) into bin/cnp-<version>/, with the
# release's CRDs beside it (config/crd/standard), for make conformance-cnp.
build_cnp() {
	local out="$ROOT/bin/cnp-$NPAPI_VERSION"
	[ -x "$out/conformance.test" ] && [ -d "$out/crds" ] && return
	log "building the network-policy-api $NPAPI_VERSION conformance suite (a few minutes, once)"
	local mod="$ROOT/bin/.build/network-policy-api-$NPAPI_VERSION"
	mkdir -p "$mod" "$out/crds"
	printf 'module winnet.local/build/npapi\n\ngo 1.26\n\nrequire sigs.k8s.io/network-policy-api %s\n' "$NPAPI_VERSION" >"$mod/go.mod"
	[ -f "$mod/go.sum" ] || : >"$mod/go.sum"
	printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/network-policy-api/conformance/tests"\n' >"$mod/tools.go"
	(cd "$mod" && go mod tidy >/dev/null &&
		go test -c -vet=off -trimpath -o "$out/conformance.test.tmp" sigs.k8s.io/network-policy-api/conformance)
	mv "$out/conformance.test.tmp" "$out/conformance.test"
	local src
	src=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)
	cp "$src"/config/crd/standard/policy.networking.k8s.io_*.yaml "$out/crds/"
	chmod -R u+w "$out/crds"
}

"$ROOT/hack/setup-test-deps.sh" kubelet e2e >/dev/null
build_containerd
build_images
if [ "${1:-}" = cnp ]; then
	build_cnp
	echo "$ROOT/bin/cnp-$NPAPI_VERSION"
fi
"$ROOT/bin/containerd-$CONTAINERD_VERSION/containerd" --version >/dev/null
"$ROOT/bin/containerd-$CONTAINERD_VERSION/ctr" --version >/dev/null
echo "$ROOT/bin/containerd-$CONTAINERD_VERSION"
echo "$IMAGES"
