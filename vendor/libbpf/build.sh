#!/usr/bin/env bash
# Build the pinned libbpf as a static, position-independent library.
#
# Output (git-ignored): vendor/libbpf/build/install/{include,lib/libbpf.a}
# and build/install/VERSION. Idempotent: does nothing when the install is
# already there for the pinned version (or for the same LIBBPF_SRC).
#
# LIBBPF_SRC=/path/to/libbpf builds that source tree instead of the pin;
# otherwise fetch.sh supplies the verified tarball.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/PIN"
build="$here/build"
install="$build/install"
want="${LIBBPF_SRC:-pin:$LIBBPF_VERSION:$LIBBPF_SHA256}"

if [ -f "$install/lib/libbpf.a" ] && [ "$(cat "$install/SOURCE" 2>/dev/null)" = "$want" ]; then
    exit 0
fi

if [ -n "${LIBBPF_SRC:-}" ]; then
    src="$LIBBPF_SRC"
    [ -f "$src/src/libbpf.h" ] || { echo "build.sh: $src is not a libbpf source tree (no src/libbpf.h)" >&2; exit 1; }
else
    "$here/fetch.sh"
    rm -rf "$build/src"
    mkdir -p "$build/src"
    tar -xzf "$build/libbpf_${LIBBPF_VERSION}.orig.tar.gz" -C "$build/src" --strip-components=1
    src="$build/src"
fi

rm -rf "$install" "$build/obj"
mkdir -p "$build/obj"
echo "build.sh: building static libbpf from $src"
make -s -C "$src/src" -j"$(nproc)" \
    BUILD_STATIC_ONLY=1 OBJDIR="$build/obj" DESTDIR="$install" PREFIX= LIBDIR=/lib \
    EXTRA_CFLAGS="-fPIC -O2 -g" \
    install install_uapi_headers >/dev/null
printf '%s\n' "$want" > "$install/SOURCE"
echo "build.sh: $install/lib/libbpf.a"
