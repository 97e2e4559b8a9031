#!/usr/bin/env bash
# Builds the previous release of winnet, the one hack/previous-release names (<commit> <version>),
# from this checkout's git history into bin/release-<version>-<first 12 hex of the commit>/:
#   src/    the source tree of that commit (git archive: no git state of its own)
#   linux/  winnet-agent, winnet-controller, winnet-cni and kubectl-winnet (GOOS=linux go build ./cmd/...
#           in src/), built with the Go toolchain of this checkout's go.mod, as the current release is
#   stamp   written last, naming the commit, the version and the toolchain: a run that finds it (same
#           toolchain) only prints the directory; a run that stopped half-way starts again from scratch
# The directory is the last line of stdout; progress goes to stderr. Nothing is fetched but Go
# modules (from the module cache or the module proxy, as every build): a checkout without the commit,
# such as a shallow clone, fails and says how to get the history.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { echo "build-previous-release: $*" >&2; }

# git and tar (Debian's git and tar packages; a checkout has git) are what this script adds to the build.
for cmd in git tar go; do
	command -v "$cmd" >/dev/null || { log "$cmd is not installed (git and tar: apt-get install git tar; go: the machine's Go toolchain)"; exit 1; }
done

# The one line of hack/previous-release that is neither a comment nor blank.
lines=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' hack/previous-release | grep -v '^[[:space:]]*$' || true)
if [ "$(printf '%s\n' "$lines" | grep -c .)" != 1 ]; then
	log "hack/previous-release must hold exactly one line '<40-hex commit> <version>', not:"
	printf '%s\n' "$lines" >&2
	exit 1
fi
read -r commit version extra <<<"$lines"
if ! [[ $commit =~ ^[0-9a-f]{40}$ && $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ && -z ${extra:-} ]]; then
	log "hack/previous-release: want '<40-hex commit> <version>' (such as '$(printf '%040d' 0) 1.2.3'), got '$lines'"
	exit 1
fi

toolchain=$(sed -n 's/^toolchain //p' go.mod)
if [ -z "$toolchain" ]; then
	log "go.mod has no toolchain line: the previous release is built with the current release's Go"
	exit 1
fi
dir="$ROOT/bin/release-$version-${commit:0:12}"
stamp="commit=$commit version=$version toolchain=$toolchain"
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ]; then
	echo "$dir"
	exit 0
fi

if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
	shallow=""
	if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
		shallow=" (this is a shallow clone)"
	fi
	log "commit $commit of winnet $version (hack/previous-release) is not in this checkout's history$shallow."
	log "Get the history, then run again: git fetch --unshallow (or git fetch origin $commit)."
	exit 1
fi

log "building winnet $version (commit ${commit:0:12}) with $toolchain into $dir"
rm -rf "$dir"
mkdir -p "$dir/src" "$dir/linux"
git archive --format=tar "$commit" | tar -x -C "$dir/src"
# -buildvcs=false: src/ has no git metadata, and go would otherwise stamp the binaries with the
# revision of the checkout that holds bin/.
(cd "$dir/src" && GOTOOLCHAIN="$toolchain" GOOS=linux GOFLAGS= go build -buildvcs=false -o "$dir/linux/" ./cmd/...)
for b in winnet-agent winnet-controller winnet-cni kubectl-winnet; do
	if [ ! -x "$dir/linux/$b" ]; then
		log "the build of $version made no $b"
		exit 1
	fi
done
echo "$stamp" >"$dir/stamp"
log "built winnet $version"
echo "$dir"
