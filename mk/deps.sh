#!/usr/bin/env bash
# Installs the Debian packages kgym builds and tests with, when missing. As root it runs apt-get
# itself; otherwise it prints the exact command and fails.
set -euo pipefail
PACKAGES=(build-essential pkg-config libmicrohttpd-dev libjansson-dev libpcre2-dev libcmocka-dev
          libseccomp-dev libcap-dev libssl-dev libcurl4-openssl-dev libutf8proc-dev clang
          python3 python3-dev python3-venv python3-pip curl jq ca-certificates)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "kgym: missing Debian packages; run as root:" >&2
    echo "  apt-get update && $cmd" >&2
    exit 1
fi
echo "kgym: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd
