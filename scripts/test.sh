#!/usr/bin/env bash
# Run the test suite: static checks, then pytest. pytest's exit code 5 ("no tests collected")
# counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python

"$PY" manage.py check --fail-level WARNING || exit 1
"$PY" manage.py makemigrations --check --dry-run >/dev/null || { echo "missing migrations"; exit 1; }
"${VENV:-.venv}/bin/ruff" check . || exit 1
"${VENV:-.venv}/bin/mypy" . || exit 1
# Browser tests drive Debian's Chromium; installed here (as root) when missing.
scripts/install-browser.sh || exit 1
"$PY" -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing"
  exit 1
fi
exit "$status"
