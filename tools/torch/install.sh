#!/usr/bin/env bash
# Installs PyTorch (the PyPI CUDA wheel) for the GPU tier, pinned by requirements.txt beside
# this script, into a virtual environment cached outside the repository:
#   ${HAMI_TORCH_CACHE:-~/.cache/hami-py/torch}/<hash of requirements.txt>/venv
# and links it as .venv/torch. Wheels are downloaded once into ${HAMI_WHEEL_CACHE:-
# ~/.cache/hami-py/wheels}; a second run (a fresh clone too) downloads nothing and installs
# nothing: it only links. The first run downloads about 2.8 GB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lock="$here/requirements.txt"
python=${PYTHON:-python3}
key=$(sha256sum "$lock" | cut -c1-16)
cache=${HAMI_TORCH_CACHE:-$HOME/.cache/hami-py/torch}
wheels=${HAMI_WHEEL_CACHE:-$HOME/.cache/hami-py/wheels}
venv="$cache/$key/venv"
stamp="$venv/.hami-installed"
if [[ ! -f "$stamp" ]]; then
  mkdir -p "$wheels" "$cache/$key"
  # Download only what the wheel cache lacks: one requirement at a time, skipped when its
  # wheel is there (pip would ask the index again otherwise).
  while read -r req; do
    [[ -z "$req" || "$req" == \#* ]] && continue
    name=${req%%==*}; version=${req#*==}
    pattern="$(echo "$name" | tr '-' '_' | tr 'A-Z' 'a-z')-$version-*.whl"
    if ! compgen -G "$wheels/$pattern" > /dev/null && \
       ! compgen -G "$wheels/$(echo "$name" | tr 'A-Z' 'a-z')-$version-*.whl" > /dev/null; then
      echo "tools/torch: downloading $req" >&2
      "$python" -m pip download -q --disable-pip-version-check --no-deps -d "$wheels" "$req"
    fi
  done < "$lock"
  rm -rf "$venv.partial"
  "$python" -m venv "$venv.partial"
  "$venv.partial/bin/python" -m pip install -q --disable-pip-version-check --no-index \
      --no-deps --find-links "$wheels" -r "$lock"
  rm -rf "$venv"
  mv "$venv.partial" "$venv"
  # A venv's scripts name their interpreter by absolute path: the move makes them stale, and
  # nothing here uses them; the interpreter itself finds its packages relative to its path.
  touch "$stamp"
fi
mkdir -p "$root/.venv"
ln -sfn "$venv" "$root/.venv/torch"
echo "$root/.venv/torch/bin/python"
