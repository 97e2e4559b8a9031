#!/usr/bin/env bash
# Builds the CNI plugins shipped for Windows nodes — host-local (IPAM; winnet-agent runs host-local's allocator
# in-process on the same on-disk format, the plugin is shipped for tools that use it) — from the Go
# module proxy into bin/windows/, beside winnet-cni.exe, for the Windows image (Dockerfile.windows).
# Linux nodes and the tests use Debian's containernetworking-plugins instead. Cached by version.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PLUGINS_VERSION=${PLUGINS_VERSION:-v1.9.1}
OUT="$ROOT/bin/windows/host-local.exe"
STAMP="$ROOT/bin/.build/cni-plugins-$PLUGINS_VERSION/built"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

if [ -x "$OUT" ] && [ -f "$STAMP" ]; then exit 0; fi
mod=$(dirname "$STAMP")
mkdir -p "$mod" "$(dirname "$OUT")"
printf 'module winnet.local/build/cni-plugins\n\ngo 1.26\n\nrequire github.com/containernetworking/plugins %s\n' "$PLUGINS_VERSION" >"$mod/go.mod"
printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/containernetworking/plugins/plugins/ipam/host-local"\n' >"$mod/tools.go"
[ -f "$mod/go.sum" ] || : >"$mod/go.sum"
echo "build-windows-cni-plugins: building host-local $PLUGINS_VERSION for windows" >&2
(cd "$mod" && go mod tidy >/dev/null 2>&1 && GOOS=windows go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" github.com/containernetworking/plugins/plugins/ipam/host-local)
mv "$OUT.tmp" "$OUT"
touch "$STAMP"
