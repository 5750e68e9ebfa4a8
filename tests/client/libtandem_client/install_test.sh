#!/bin/bash
# Installs libtandem-client's component of the build into a temp prefix, then compiles and links
# installed_example.cpp with only `pkg-config --cflags --libs tandem-client` (C++17, -Werror) and
# runs it: the installed header must be self-contained and the .so carry its SONAME.
# usage: install_test.sh BUILD_DIR CXX SOURCE_DIR
set -euo pipefail
build=$1 cxx=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --component tandem_client --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name tandem-client.pc)
[ -n "$pc" ] || { echo "FAIL: no tandem-client.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# Nothing but the header, the library and the pkg-config file (and its symlinks).
find "$tmp/prefix" -type f | sed "s|$tmp/prefix/||" | sort
[ -f "$tmp/prefix/include/tandem/client.h" ] || { echo "FAIL: header not installed"; exit 1; }
flags=$(pkg-config --cflags --libs tandem-client)
echo "pkg-config: $flags"
# -nostdinc++ is not used: the standard library is allowed; the tree's include dirs are not seen.
"$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror "$src/installed_example.cpp" $flags -o "$tmp/example"
libdir=$(pkg-config --variable=libdir tandem-client)
readelf -d "$tmp/example" | grep -q 'NEEDED.*libtandem-client.so.0' || { echo "FAIL: not linked to libtandem-client.so.0"; exit 1; }
set +e
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/example" "$tmp/nobody.sock")
rc=$?
set -e
echo "example: rc $rc: $out"
[ $rc -eq 3 ] && [[ $out == "cannot connect to $tmp/nobody.sock: no such socket"* ]] || { echo "FAIL: unexpected result"; exit 1; }
echo PASS
