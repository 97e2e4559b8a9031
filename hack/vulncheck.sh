#!/usr/bin/env bash
# Checks winnet's Go dependencies and standard library for known vulnerabilities (part of make verify):
# govulncheck, for the linux and for the windows build, fails when the code calls a vulnerable symbol,
# unless hack/vulncheck-allow.yaml holds a live decision about that advisory (its advisory, reason and
# expiry date). Both tools and the database are built from the Go module proxy into bin/, cached by
# version:
#   - govulncheck (golang.org/x/vuln/cmd/govulncheck) into bin/govulncheck-<version>/;
#   - the vulnerability database from golang.org/x/vulndb's data/osv (its reports as OSV JSON) with the
#     module's own cmd/indexdb, into bin/vulndb-<version>/db: the layout `govulncheck -db file://...`
#     reads. The database's host is not reached: the database is as new as VULNDB_VERSION, so bump it
#     (the newest pseudo-version the proxy serves) to learn of newer advisories.
# It checks the builds, the packages `make build` ships (./cmd/...); the reports go to
# bin/vulncheck-<goos>.json.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GOVULNCHECK_VERSION=${GOVULNCHECK_VERSION:-v1.9.0}
VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
GOVULNCHECK="$ROOT/bin/govulncheck-$GOVULNCHECK_VERSION/govulncheck"
VULNDB="$ROOT/bin/vulndb-$VULNDB_VERSION"
# The standard library checked is that of the toolchain winnet is built with (go.mod's toolchain line).
export GOTOOLCHAIN="$(sed -n 's/^toolchain //p' "$ROOT/go.mod")"

log() { echo "vulncheck: $*" >&2; }

build_govulncheck() {
	[ -x "$GOVULNCHECK" ] && return
	log "building govulncheck $GOVULNCHECK_VERSION from the Go module proxy (once)"
	GOBIN="$(dirname "$GOVULNCHECK")" GOFLAGS=-mod=mod go install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"
}

# build_vulndb indexes golang.org/x/vulndb's data/osv into $VULNDB/db with the module's cmd/indexdb.
build_vulndb() {
	[ -s "$VULNDB/db/index/modules.json" ] && return
	log "building the vulnerability database golang.org/x/vulndb@$VULNDB_VERSION (once)"
	mkdir -p "$VULNDB"
	GOBIN="$VULNDB" GOFLAGS=-mod=mod go install "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION"
	local src
	src=$(cd "$VULNDB" && GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ ! -d "$src/data/osv" ]; then
		log "golang.org/x/vulndb@$VULNDB_VERSION has no data/osv (in '$src')"
		exit 1
	fi
	rm -rf "$VULNDB/db.tmp"
	"$VULNDB/indexdb" -vulns "$src/data/osv" -out "$VULNDB/db.tmp"
	rm -rf "$VULNDB/db"
	mv "$VULNDB/db.tmp" "$VULNDB/db"
}

build_govulncheck
build_vulndb
reports=()
for goos in linux windows; do
	report="$ROOT/bin/vulncheck-$goos.json"
	log "govulncheck GOOS=$goos ./cmd/..."
	(cd "$ROOT" && GOOS=$goos "$GOVULNCHECK" -db "file://$VULNDB/db" -format json ./cmd/... >"$report.tmp")
	mv "$report.tmp" "$report"
	reports+=("$goos=$report")
done
cd "$ROOT" && go run ./hack/vulncheck -allow hack/vulncheck-allow.yaml -db "golang.org/x/vulndb@$VULNDB_VERSION" "${reports[@]}"
