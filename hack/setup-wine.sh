#!/usr/bin/env bash
# Prepares the Wine prefix that `make test-windows` runs the Windows test binaries in, once:
#   - builds bin/wine/bcryptprimitives.dll from test/wine/bcryptprimitives/prng.c with MinGW-w64's gcc
#     (Wine 8.0 lacks bcryptprimitives.dll!ProcessPrng, which every Go 1.22+ binary needs at start)
#   - creates the prefix bin/wine/prefix (wineboot) and puts the DLL in its system32
# wine64 and the MinGW-w64 gcc are Debian packages on test/hostcmd's list: hack/setup-test-deps.sh
# installs them. Prints the prefix's path. Safe to run again: every step checks before it acts.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bin/wine"
PREFIX="$OUT/prefix"
WINE=/usr/lib/wine/wine64
WINESERVER=/usr/lib/wine/wineserver64
CC=x86_64-w64-mingw32-gcc-win32
SRC="$ROOT/test/wine/bcryptprimitives/prng.c"
DLL="$OUT/bcryptprimitives.dll"

log() { echo "setup-wine: $*" >&2; }

for c in "$WINE" "$WINESERVER" "$(command -v $CC || echo $CC)"; do
	if [ ! -x "$c" ]; then
		log "$c is missing: run hack/setup-test-deps.sh as root (it installs wine64 and gcc-mingw-w64-x86-64-win32)"
		exit 1
	fi
done
mkdir -p "$OUT"

if [ ! -f "$DLL" ] || [ "$SRC" -nt "$DLL" ]; then
	log "building $DLL from $SRC"
	"$CC" -O2 -Wall -Werror -shared -nostdlib -Wl,--entry,DllMain -Wl,--no-insert-timestamp \
		-o "$DLL.tmp" "$SRC" -ladvapi32
	mv "$DLL.tmp" "$DLL"
fi

export WINEPREFIX="$PREFIX" WINEDEBUG=-all
# No Mono or Gecko: the tests need neither, and installing them would download.
export WINEDLLOVERRIDES="mscoree,mshtml="
if [ ! -f "$PREFIX/system.reg" ]; then
	log "creating the Wine prefix $PREFIX (about 10 s, once)"
	rm -rf "$PREFIX"
	"$WINE" wineboot --init >/dev/null 2>&1
	# wineboot returns before the registry is written: wait for the prefix's wineserver to exit.
	"$WINESERVER" --wait
fi
[ -f "$PREFIX/system.reg" ] || { log "wineboot did not create $PREFIX"; exit 1; }
SYS32="$PREFIX/drive_c/windows/system32"
if ! cmp -s "$DLL" "$SYS32/bcryptprimitives.dll"; then
	cp "$DLL" "$SYS32/bcryptprimitives.dll"
fi
echo "$PREFIX"
