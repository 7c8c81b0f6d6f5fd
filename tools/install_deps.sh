#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what building and testing napkin needs, from Debian's packages and PyPI only.
# Idempotent: silent when everything is present, loud about what it installs or cannot.
#   tools/install_deps.sh            core build + tests (CI and `make test`)
#   tools/install_deps.sh --cuda     also the pinned CUTLASS/CuTe headers (nvidia-cutlass)
set -euo pipefail

APT_PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-14-dev   # build; clang + libFuzzer for the fuzz target
  libgtest-dev libgmock-dev libbenchmark-dev       # GoogleTest, Google Benchmark
  libcli11-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev
  librsvg2-bin                                     # rsvg-convert: SVG -> PNG in tests
  chromium                                         # headless browser: napkin report's page test
)
# CUTLASS/CuTe headers for runtime/ (pinned: the device library is written against this API).
CUTLASS_VERSION="4.2.0.0"
CUTLASS_PIP="nvidia-cutlass==$CUTLASS_VERSION"
# cuobjdump and nvdisasm (pinned): tools/check_chunk_loops.py reads the kernels' SASS in the tests.
SASS_TOOLS_VERSION="13.5.37"
SASS_TOOLS_PIP=("nvidia-cuda-cuobjdump==$SASS_TOOLS_VERSION" "nvidia-cuda-nvdisasm==$SASS_TOOLS_VERSION")

# Presence checks capture a command's whole output before matching it: `cmd | grep -q` under
# pipefail fails whenever grep exits at its match before cmd has written everything (cmd then
# dies of SIGPIPE), which made every run reinstall what was there.
missing=()
for p in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_deps: need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install_deps: done"
fi

# pip install of "$@" where Debian's python3 refuses system-wide installs (PEP 668): plain, then
# allowing it, then to the user site (nothing of the system's is replaced); pip first if absent.
pip_install() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  python3 -m pip install -q "$@" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "$@" 2>/dev/null ||
    python3 -m pip install -q --user --break-system-packages "$@"
}

if [[ "${1:-}" == "--cuda" ]]; then
  shown=$(python3 -m pip show nvidia-cutlass 2>/dev/null || true)
  if ! grep -qx "Version: $CUTLASS_VERSION" <<<"$shown"; then
    echo "install_deps: installing $CUTLASS_PIP (CuTe/CUTLASS headers)"
    pip_install "$CUTLASS_PIP"
  fi
  shown=$(python3 -m pip show nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm 2>/dev/null || true)
  if [[ $(grep -cx "Version: $SASS_TOOLS_VERSION" <<<"$shown") != 2 ]]; then
    echo "install_deps: installing ${SASS_TOOLS_PIP[*]} (SASS of the generated kernels)"
    pip_install "${SASS_TOOLS_PIP[@]}"
  fi
fi
