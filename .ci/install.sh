# Sourced by .ci/run and .ci/lowest: the README's install (`pip install -e '.[dev]'`) into a
# fresh virtual environment, done by uv: the same packages from the indexes and constraints pip
# is configured with, unpacked in parallel (51 s against pip's 146 s on 2 cores, bytecode
# compiled as pip compiles it). pip itself when uv cannot be had.

# One setting of pip's configuration (its files or PIP_* variables), empty when unset.
pip_setting() {
  "$1/bin/pip" config list 2>/dev/null | sed -n "s/^[^.]*\.$2='\(.*\)'\$/\1/p" | head -n 1
}

# install VENV [UV_ARG...]: the project and its dev extra into VENV; UV_ARGS go to uv only
# (pip has no lowest resolution: without uv, such an install fails rather than install the
# newest versions under the lowest's name).
install() {
  local venv="$1"
  shift
  python3 -m venv "$venv" || return 1
  if "$venv/bin/pip" install -q uv; then
    local uv_args=(--no-cache --compile-bytecode --index-strategy unsafe-best-match "$@")
    local indexes constraints
    indexes="$(pip_setting "$venv" extra-index-url)"
    constraints="$(pip_setting "$venv" constraint)"
    for index in $indexes; do uv_args+=(--extra-index-url "$index"); done
    for file in $constraints; do uv_args+=(--constraint "$file"); done
    "$venv/bin/uv" pip install --python "$venv/bin/python" "${uv_args[@]}" -e '.[dev]' && return 0
    echo "ci: uv could not install the project" >&2
  fi
  if [ "$#" -gt 0 ]; then
    echo "ci: only uv can install with $*" >&2
    return 1
  fi
  echo "ci: pip installs the project" >&2
  "$venv/bin/pip" install -e '.[dev]'
}

# tests VENV [PYTEST_ARG...]: pytest's status, except that no tests collected fails too.
tests() {
  local venv="$1"
  shift
  "$venv/bin/python" -m pytest "$@"
  local status=$?
  if [ "$status" -eq 5 ]; then
    echo "ci: pytest collected no tests" >&2
    return 1
  fi
  return "$status"
}
