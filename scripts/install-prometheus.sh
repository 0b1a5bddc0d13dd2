#!/usr/bin/env bash
# Install Debian's Prometheus server for the canary-analysis tests and the demo's canary when it is missing.
# Idempotent: does nothing when the `prometheus` binary is already on PATH. Needs root (CI runs as
# root); without root it only says what is missing, and the tests that need it skip themselves.
# Only the binary is used: the tests start their own server on a free loopback port with a
# generated configuration (tests/prometheus.py); the Debian service is stopped and disabled.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-prometheus: prometheus is missing and this is not root; canary-analysis tests and the demo's canary step will be skipped" >&2
  exit 0
fi
echo "==> installing prometheus (Debian package) for the canary's analysis rounds"
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d answering 101 keeps the package's own service from starting (there may be no init).
had_policy=0
[ -e /usr/sbin/policy-rc.d ] && had_policy=1
if [ "$had_policy" = 0 ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
if [ "$had_policy" = 0 ]; then
  rm -f /usr/sbin/policy-rc.d
fi
prometheus --version 2>&1 | head -1
