#!/usr/bin/env bash
# Install Debian's Chromium (and its driver) for the browser tests when it is missing.
# Idempotent: does nothing when /usr/bin/chromium already exists. Needs root (CI runs as root);
# without root it only says what is missing, and the browser tests skip themselves.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-browser: /usr/bin/chromium is missing and this is not root; browser tests will be skipped" >&2
  exit 0
fi
echo "==> installing chromium and chromium-driver (Debian packages) for the browser tests"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
/usr/bin/chromium --version
