# shellcheck shell=bash
# Idempotent Python package installation for the project's scripts (sourced by scripts/lib.sh).
# Nothing is installed when the module already imports.
#
#   pip_ensure MODULE REQUIREMENT    e.g. pip_ensure psycopg 'psycopg[binary]>=3.1'

pip_ensure() {
    local module="$1" requirement="$2"
    python3 -c "import $module" 2>/dev/null && return 0
    log "pip install $requirement"
    # Debian's own interpreter refuses system-wide installs (PEP 668); --user is accepted there.
    python3 -m pip install --quiet "$requirement" >&2 ||
        python3 -m pip install --quiet --user "$requirement" >&2 ||
        die "could not install $requirement (python3 -m pip install '$requirement')"
    python3 -c "import $module" 2>/dev/null || die "$requirement installed but 'import $module' fails"
}
