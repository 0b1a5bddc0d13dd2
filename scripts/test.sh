#!/usr/bin/env bash
# Run the test suite: static checks, then pytest (listing the slowest tests). pytest's exit code 5
# ("no tests collected") counts as a failure. OPTGATE_STATIC_CHECKS=0 skips the static checks, for a
# second pass on another database after they already ran.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${VENV:-.venv}/bin/python
# mypy's incremental cache outside the checkout, like pip's and the kit's: a fresh clone on a
# machine that ran the checks before takes seconds instead of minutes. One cache per layout of the
# modules (their paths and the models' sources): the Django plugin misreads a cache written before
# a model moved to another app (reverse relations go missing), so a new layout starts cold.
layout=$( (git ls-files '*.py' 2>/dev/null || find . -name '*.py' -not -path './.venv/*' | sort) | while read -r f; do
  case $f in */models.py | */models/*.py) cat "$f" ;; *) echo "$f" ;; esac
done | sha256sum | cut -c1-16)
export MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-$HOME/.cache/optgate/mypy/$layout}

timed() {  # timed NAME COMMAND...: run it and say how long it took
  local name=$1 begun=$SECONDS
  shift
  "$@"
  local status=$?
  echo "--- $name: $((SECONDS - begun))s"
  return $status
}

if [ "${OPTGATE_STATIC_CHECKS:-1}" != "0" ]; then
  timed "django checks" "$PY" manage.py check --fail-level WARNING || exit 1
  timed "migrations up to date" "$PY" manage.py makemigrations --check --dry-run >/dev/null || {
    echo "missing migrations"
    exit 1
  }
  timed "ruff" "${VENV:-.venv}/bin/ruff" check . || exit 1
  timed "mypy" "${VENV:-.venv}/bin/mypy" . || exit 1
  # The layers run one way (docs/architecture.md): pyproject.toml's import contracts.
  timed "import contracts" "${VENV:-.venv}/bin/lint-imports" --no-cache || exit 1
fi
# Browser tests drive Debian's Chromium; installed here (as root) when missing.
timed "browser install" scripts/install-browser.sh || exit 1
timed "pytest" "$PY" -m pytest --durations=30 "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing"
  exit 1
fi
exit "$status"
