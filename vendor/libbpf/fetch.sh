#!/usr/bin/env bash
# Fetch the pinned libbpf source tarball and verify it.
#
# Output: vendor/libbpf/build/libbpf_<version>.orig.tar.gz (sha256-checked).
#
# The tarball comes from Debian's source archive through `apt-get source
# --download-only`, run with a private apt configuration (its own sources file,
# lists and cache directories under build/apt) so the system's apt setup is
# never changed. The archive URI is read at run time from the machine's own
# Debian apt sources; no host name is written here.
#
# Overrides: LIBBPF_TARBALL=/path/to.tar.gz uses that file (still verified);
# LIBBPF_SRC=/path/to/tree skips fetching altogether (see build.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/PIN"
build="$here/build"
tarball="$build/libbpf_${LIBBPF_VERSION}.orig.tar.gz"
mkdir -p "$build"

verify() {
    local got
    got=$(sha256sum "$1" | cut -d' ' -f1)
    if [ "$got" != "$LIBBPF_SHA256" ]; then
        echo "fetch.sh: sha256 mismatch for $1" >&2
        echo "  expected $LIBBPF_SHA256" >&2
        echo "  got      $got" >&2
        echo "  refusing to build an unverified libbpf" >&2
        return 1
    fi
}

if [ -n "${LIBBPF_TARBALL:-}" ]; then
    verify "$LIBBPF_TARBALL"
    [ "$LIBBPF_TARBALL" -ef "$tarball" ] || cp "$LIBBPF_TARBALL" "$tarball"
    exit 0
fi
if [ -f "$tarball" ]; then
    # Bundled in an sdist, or fetched before: used only when it verifies, never replaced silently.
    verify "$tarball" || { echo "  delete $tarball to fetch it again" >&2; exit 1; }
    exit 0
fi

# The first Debian archive URI configured on this machine (deb822 or one-line format).
debian_uri() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" || $1 == "deb-src" {
                 for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\/.*\/debian\/?$/) { print $i; exit } }' "$f"
    done
}
uri=$(debian_uri | head -n 1)
if [ -z "$uri" ]; then
    echo "fetch.sh: no Debian archive found in /etc/apt sources." >&2
    echo "  Set LIBBPF_TARBALL=/path/to/libbpf_${LIBBPF_VERSION}.orig.tar.gz or LIBBPF_SRC=/path/to/libbpf." >&2
    exit 1
fi

apt_dir="$build/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$apt_dir/dl"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed=""
[ -f "$keyring" ] && signed="[signed-by=$keyring] "
printf 'deb-src %s%s trixie main\n' "$signed" "$uri" > "$apt_dir/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/parts"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root"
    -o "Debug::NoLocking=1"
)
echo "fetch.sh: libbpf ${LIBBPF_DEBIAN_VERSION} source from the Debian archive (private apt config in $apt_dir)"
apt-get -qq "${apt_opts[@]}" update
(cd "$apt_dir/dl" && apt-get -qq "${apt_opts[@]}" source --download-only "libbpf=${LIBBPF_DEBIAN_VERSION}")
verify "$apt_dir/dl/libbpf_${LIBBPF_VERSION}.orig.tar.gz"
cp "$apt_dir/dl/libbpf_${LIBBPF_VERSION}.orig.tar.gz" "$tarball"
echo "fetch.sh: verified $tarball"
