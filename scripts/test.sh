#!/usr/bin/env bash
# Run the test suite: static checks, then pytest in two invocations, each listing its slowest tests:
#
#   1. the fast tests (not marked engine, worker, browser, prometheus or serial) spread over pytest-xdist workers:
#      OPTGATE_TEST_WORKERS of them (default: the CPUs this process may use; 0 or 1 = one process);
#   2. the slow marked tests (engine, worker, browser, prometheus) and those marked serial in one process, one
#      after the other: two vLLM engines already use both cores of a CI box, the demo behind the
#      real-engine tests runs once per session, and the PostgreSQL concurrency races open fifty
#      connections each.
#
# Arguments and PYTEST_ADDOPTS go to both invocations. A marker expression among them (-m EXPR, as
# the PostgreSQL pass of .ci/run gives) narrows each half instead of replacing its selection:
# "(EXPR) and not (SLOW)", then "(EXPR) and (SLOW)".
#
# Exit status: the first failing invocation's (the slow half still runs after failures in the fast
# one, unless pytest was interrupted or misused: exit 2, 3 or 4). pytest's exit code 5 ("no tests
# collected") fails the run when nothing narrowed the selection (each half of the whole suite has
# tests, so an empty one means the markers broke) and when both halves collected nothing; with
# arguments, one empty half is expected (the PostgreSQL pass selects no browser or engine-only
# tests, a single test file is either fast or slow) and passes.
#
# OPTGATE_STATIC_CHECKS=0 skips the static checks, for a second pass on another database after they
# already ran; OPTGATE_TEST_SLOW=0 skips the slow half (and the browser install): `make test-fast`.
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
with_slow=$([ "${OPTGATE_TEST_SLOW:-1}" != "0" ] && echo 1 || echo 0)
if [ "$with_slow" = 1 ]; then
  # Browser tests drive Debian's Chromium; installed here (as root) when missing.
  timed "browser install" scripts/install-browser.sh || exit 1
  # The canary-analysis tests start Debian's Prometheus server; installed here (as root) when missing.
  timed "prometheus install" scripts/install-prometheus.sh || exit 1
fi

# --- the two pytest invocations -----------------------------------------------------------------

SLOW="engine or worker or browser or prometheus or serial"

# PYTEST_ADDOPTS split as pytest splits it (shlex), then the arguments: one list, with the last -m
# taken out (pytest keeps only the last one too).
args=()
if [ -n "${PYTEST_ADDOPTS:-}" ]; then
  split='import os, shlex, sys; sys.stdout.write("".join(a + "\0" for a in shlex.split(os.environ["PYTEST_ADDOPTS"])))'
  if ! "$PY" -c "$split" >/dev/null 2>&1; then
    echo "PYTEST_ADDOPTS is not a shell-quoted list of arguments: $PYTEST_ADDOPTS"
    exit 1
  fi
  mapfile -d '' args < <("$PY" -c "$split")
fi
args+=("$@")
narrowed=$([ "${#args[@]}" -gt 0 ] && echo 1 || echo 0)
user_marks=""
rest=()
i=0
while [ "$i" -lt "${#args[@]}" ]; do
  arg=${args[$i]}
  case $arg in
    --*) rest+=("$arg") ;;
    -m)
      i=$((i + 1))
      user_marks=${args[$i]:-}
      ;;
    -m*) user_marks=${arg#-m} ;;
    *) rest+=("$arg") ;;
  esac
  i=$((i + 1))
done
if [ -n "$user_marks" ]; then
  fast_marks="($user_marks) and not ($SLOW)"
  slow_marks="($user_marks) and ($SLOW)"
else
  fast_marks="not ($SLOW)"
  slow_marks=$SLOW
fi

# Workers for the fast half: OPTGATE_TEST_WORKERS, or every CPU this process may run on, capped by
# a cgroup CPU quota (a container limited to 2 CPUs on a 64-core host gets 2, where `-n auto` would
# count the host's cores).
cpus=$("$PY" - <<'EOF'
import math
import os
count = len(os.sched_getaffinity(0))
try:
    quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
    if quota != "max":
        count = min(count, max(1, math.ceil(int(quota) / int(period))))
except (OSError, ValueError):
    pass
print(count)
EOF
)
workers=${OPTGATE_TEST_WORKERS:-${cpus:-1}}
case $workers in
  '' | *[!0-9]*)
    echo "OPTGATE_TEST_WORKERS must be a number of workers (0 or 1: one process), not '$workers'"
    exit 1
    ;;
esac
parallel=()
if [ "$workers" -gt 1 ]; then
  if "$PY" -c 'import xdist' 2>/dev/null; then
    # --dist load (tests handed out one by one, in collection order): each worker keeps
    # pytest-django's order, transactional tests after the others. loadfile/loadscope would hand out
    # whole files, so a file's transactional test (its flush empties the migrated rows) ran before
    # other files' tests on the same worker: 192 failures.
    parallel=(-n "$workers" --dist load)
  else
    echo "pytest-xdist is not installed (scripts/bootstrap.sh installs the dev extra): fast tests in one process"
  fi
fi

# run_pytest NAME MARKS [OPTIONS...]: one invocation; PYTEST_ADDOPTS already went into the arguments.
run_pytest() {
  local name=$1 marks=$2
  shift 2
  echo "==> pytest ($name): -m \"$marks\" $*"
  PYTEST_ADDOPTS="" timed "pytest ($name)" "$PY" -m pytest --durations=30 "$@" -m "$marks" "${rest[@]}"
}

# settle NAME STATUS: the half's status once its "no tests collected" (5) is judged.
settle() {
  if [ "$2" -ne 5 ]; then
    echo "$2"
  elif [ "$narrowed" = 1 ]; then
    echo "pytest ($1): nothing in this half of the selection; the other half ran" >&2
    echo 0
  else
    echo "pytest ($1) collected no tests of the whole suite: failing" >&2
    echo 1
  fi
}

run_pytest fast "$fast_marks" "${parallel[@]}"
fast=$?
if [ "$with_slow" = 0 ]; then
  [ "$fast" -eq 5 ] && [ "$narrowed" = 0 ] && echo "pytest collected no tests: failing" && exit 1
  exit "$fast"
fi
slow=0
case $fast in
  2 | 3 | 4) echo "pytest (fast) was interrupted or could not run (exit $fast): the slow tests do not run" ;;
  *)
    run_pytest slow "$slow_marks"
    slow=$?
    ;;
esac

# The browser tests' screenshots (each demo ticket's first screen among them) stay in the checkout,
# gitignored and never cleaned, for CI to keep as artifacts: say where.
shots=${OPTGATE_SCREENSHOTS_DIR:-artifacts/screenshots}
if [ -d "$shots" ]; then
  echo "--- screenshots: $(cd "$shots" && pwd) ($(find "$shots" -maxdepth 1 -name '*.png' | wc -l) PNG files)"
fi

if [ "$fast" -eq 5 ] && [ "$slow" -eq 5 ]; then
  echo "pytest collected no tests in either half: failing"
  exit 1
fi
fast=$(settle fast "$fast")
slow=$(settle slow "$slow")
if [ "$fast" -ne 0 ]; then
  exit "$fast"
fi
exit "$slow"
