#!/usr/bin/env bash
# One-command set-up for a fresh Debian machine, as root; idempotent.
#   ./setup.sh            install what is missing (Debian packages, .venv with the project)
#   ./setup.sh run ARGS   ... then `emulate run ARGS` (default: scenarios/moe_mix.yaml)
#   ./setup.sh test       ... then the checks and the whole test suite (what CI runs)
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(
  python3 python3-venv python3-dev gcc
  iproute2 iputils-ping ethtool procps psmisc
  iperf3 clang llvm libbpf-dev bpftool tcpdump tshark prometheus
  # the underlay guard of a fabric split over servers (fabrics/underlay_guard.py)
  nftables
  # AF_XDP ports (engine.send_path: af_xdp): emulator/native's _xsk module links libxdp/libbpf
  # and zlib (the receive path checks each ICRC with its crc32)
  libxdp-dev zlib1g-dev
  # headless, for the test that opens report.html (tests/system/test_report_html.py); its
  # dependencies bring a font (fonts-dejavu-core through fontconfig-config), which is enough
  chromium
  # fabric.builder: mininet and emulator.mininet (a user's Mininet network): Mininet's Python
  # API and mnexec; Open vSwitch is only recommended and this kernel has none
  mininet
)
VENV=.venv

log() { printf '[setup] %s\n' "$*" >&2; }

install_debian_packages() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
      log "need root to install: ${missing[*]}"; exit 2
    fi
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # tshark asks whether non-root users may capture: answer no, without a prompt.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian starts a prometheus service on install; the tests start their own on loopback.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus || true
  fi
}

install_venv() {
  local stamp="$VENV/.installed"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
    log "installing the project and its Python dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e '.[dev]'
    # snappi, the Open Traffic Generator model (emulator/otg/), pins protobuf~=6.33 and
    # grpcio~=1.80 exactly; the project's Chakra code is generated for protobuf 7, on which
    # snappi's code runs too (tests/unit/test_otg_config.py). So it goes in without its pins;
    # what else it imports is in pyproject.toml.
    "$VENV/bin/python" -m pip install -q --no-deps 'snappi==1.62.0'
    touch "$stamp"
  fi
  link_mininet
}

link_mininet() {
  # Debian's Mininet is a system Python package: the virtual environment sees that one package
  # (a directory holding a link to it, on the venv's path), not all of the system's.
  local site dir=$VENV/system-mininet
  [[ -d /usr/lib/python3/dist-packages/mininet ]] || return 0
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  mkdir -p "$dir"
  ln -sfn /usr/lib/python3/dist-packages/mininet "$dir/mininet"
  printf '%s\n' "$(cd "$dir" && pwd)" > "$site/system-mininet.pth"
}

build_native() {
  # The engine's native data path (emulator/native/, C through cffi), compiled here from source
  # whenever a C or builder file is newer than what was built (a no-op otherwise). A failed
  # build does not fail the set-up: build.py says why in one line, and the engine then runs
  # its pure-Python path (summary.json engine.data_path names the path a run took).
  if ! "$VENV/bin/python" -m emulator.native.build --if-stale; then
    log "the native data path is not built: the engine will use its pure-Python path"
  fi
}

run_checks_and_tests() {
  local py="$VENV/bin/python"
  log "ruff (lint, format)"
  "$py" -m ruff check .
  "$py" -m ruff format --check .
  log "mypy"
  "$py" -m mypy
  if (($#)); then
    log "pytest $*"
    pytest_phase "$py" "$@"
    return
  fi
  # The pure tests (unit, integration) on both cores; then the system tests one at a time:
  # they replay in real time, and a second test beside them would make their runs late.
  local rc=0
  log "pytest: unit and integration tests, 2 processes"
  pytest_phase "$py" -m "not system" -n 2 || rc=$?
  log "pytest: system tests, one at a time"
  pytest_phase "$py" -m system || rc=$?
  return $rc
}

pytest_phase() {
  local py=$1 rc=0
  shift
  "$py" -m pytest "$@" || rc=$?
  if [[ $rc -eq 5 ]]; then
    log "pytest collected no tests: that is a failure, not a pass"; exit 1
  fi
  return $rc
}

install_debian_packages
install_venv
build_native
case "${1:-}" in
  "") log "ready: activate with 'source $VENV/bin/activate'" ;;
  run) shift; if (($#)); then exec "$VENV/bin/emulate" run "$@"; else exec "$VENV/bin/emulate" run scenarios/moe_mix.yaml; fi ;;
  test) shift; run_checks_and_tests "$@" ;;
  *) log "usage: $0 [run [ARGS]|test [PYTEST ARGS]]"; exit 2 ;;
esac
