#!/usr/bin/env bash
# Installs the Debian bookworm packages tandem builds and tests with (root or sudo).
# Quick when everything is already there: apt-get runs only for missing packages.
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config git
      libboost-dev libmsgpack-cxx-dev libsystemd-dev libcli11-dev nlohmann-json3-dev libutf8proc-dev
      googletest libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
      python3 python3-msgpack python3-pip python3-setuptools python3-wheel clang-14 libclang-rt-14-dev
      jargon-text python3-numpy  # tests/model_quality: its public-domain text, its numpy reference
      systemd  # systemd-analyze: the shipped unit's sandboxing test
      python3-venv curl)  # tests/client/tandem_http: a venv for the openai package; curl as a client
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
