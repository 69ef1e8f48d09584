#!/usr/bin/env bash
# Install whatever is missing, idempotently: Debian numactl, likwid, PostgreSQL, Chromium and the two-node
# test guest's QEMU, kernel and busybox, the orchestrator
# venv (.venv) and omni in it. Safe to run any number of times; fast when
# nothing changed (the venv is keyed by a hash of pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

# numactl pins runs; PostgreSQL backs the Prefect server of `omni stack up`
# (the docker-compose stack without containers, which the tests start);
# Chromium renders the HTML report headless in a test.
missing=()
command -v numactl >/dev/null || missing+=(numactl)
# likwid-bench measures a slot's memory and cache bandwidth (omni host limits, omni/host/bandwidth.py)
command -v likwid-bench >/dev/null || missing+=(likwid)
command -v pg_ctlcluster >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)  # renders the HTML report in a test
# the two-node QEMU guest of tests/numa_vm/test_numa_vm.py (virtme-ng boots a Debian
# kernel over this root filesystem; busybox is its initramfs shell)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
compgen -G "/boot/vmlinuz-*" >/dev/null || missing+=(linux-image-amd64)
command -v busybox >/dev/null || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]} (Debian packages)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
    $SUDO apt-get update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  }
fi

stamp=.venv/.omni-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "bootstrap: installing omni and its dependencies into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test,bench]' 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$stamp"
fi
