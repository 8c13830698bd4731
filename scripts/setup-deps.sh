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
# node and npm run the independent GGUF reader the tests check our files with. Checked by
# command, not by Debian package: they may come from elsewhere (NodeSource's nodejs bundles npm).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
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
