#!/usr/bin/env bash
# Fails when generated code or manifests differ from what the generators produce from the sources
# in the working tree, and when a Go file needs gofmt. Works on uncommitted trees too: it compares
# the tree before and after regenerating (the tree is left regenerated, so a failure is fixed by
# committing the result).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GENERATED=(api config/crd config/rbac config/helm/winnet/crds internal/ovs/ovsdb docs/pipeline.md docs/api-reference.md)
snapshot() {
	local d
	for d in "${GENERATED[@]}"; do [ ! -e "$d" ] || find "$d" -type f; done | LC_ALL=C sort | xargs -r sha256sum
}

before=$(snapshot)
make -s generate manifests >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
	echo "verify: generated files were out of date; 'make generate manifests' changed:" >&2
	diff <(echo "$before") <(echo "$after") | sed -n 's/^[<>] [0-9a-f]*  //p' | sort -u >&2
	exit 1
fi

unformatted=$(gofmt -l $(git ls-files -co --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
	echo "verify: gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# The test-only module test/netpol (cyclonus) must list exactly what it needs, so that it builds from
# the Go module proxy on a fresh machine.
if ! (cd test/netpol && go mod tidy -diff >/dev/null); then
	echo "verify: test/netpol/go.mod or go.sum is not tidy: run 'cd test/netpol && go mod tidy'" >&2
	exit 1
fi
echo "verify: generated files and formatting are up to date"
