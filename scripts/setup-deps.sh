#!/usr/bin/env bash
# Installs the Debian packages Betelgeuse builds and tests with, when any is missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config liburing-dev libcli11-dev nlohmann-json3-dev
      libcgroup-dev libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-dev)  # clang + its fuzzer/sanitizer runtimes: fuzz/run-fuzzers.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup-deps: all packages present"
fi
