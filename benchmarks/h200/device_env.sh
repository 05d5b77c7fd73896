# Sourced by the device scripts (h200_*.sh, x2_*.sh): the environment every device call needs.
# The device machine has no package registry, so the service's Python dependencies travel as
# wheels in ./wheels, carried with run(carry=["wheels"]). Stops the call at once if regress cannot
# import with them. Make the folder once (keep it out of git with .git/info/exclude):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d wheels sqlalchemy alembic mako tomli-w greenlet typing_extensions markupsafe jsonschema \
#     jsonschema-specifications referencing rpds-py attrs
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -d wheels ]; then
  python3 -m pip install -q --no-index --find-links wheels sqlalchemy alembic mako tomli-w jsonschema 2>&1 |
    grep -v -i warn | tail -2
fi
python3 -c "import regress.store.repo, regress.facts.bundle, jsonschema" || {
  echo "regress does not import on this machine (were the wheels carried?)"
  exit 3
}
