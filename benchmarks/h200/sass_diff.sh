#!/usr/bin/env bash
# The default sm_90a library's SASS at BASE_COMMIT against this working tree's: both built by the
# build module's own nvcc command (regress/native/build.py's COMMANDS["cuda"]), dumped with cuobjdump
# -sass, diffed. Prints the diff's line count last (0: identical machine code, kernel symbols
# included), then kernel by kernel: the base's kernels against the tree's of the same symbol (the last
# line; a tree that adds kernels, issue 40's v2 ones, shows them as new). The base's dump is cached in
# $SASS_CACHE (default /tmp/sass_diff), keyed by commit.
#   benchmarks/h200/sass_diff.sh 8814587          (issue 37's proof: the refactor changed no instruction)
#   EXTRA_FLAGS="-DRA_CUDA_SPLIT=1" benchmarks/h200/sass_diff.sh 8814587   (both built with extra -D flags)
set -euo pipefail
base=${1:?usage: benchmarks/h200/sass_diff.sh BASE_COMMIT}
root=$(git rev-parse --show-toplevel)
cd "$root"
base=$(git rev-parse --short=12 "$base")
cache=${SASS_CACHE:-/tmp/sass_diff}
mkdir -p "$cache"
tag=$(printf '%s' "${EXTRA_FLAGS:-}" | sha1sum | cut -c1-8)

cuobjdump=$(command -v cuobjdump || true)
if [ -z "$cuobjdump" ]; then
  cuobjdump=$(python - <<'PY'
import pathlib, sys
for base in sys.path:
    for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin"):
        c = pathlib.Path(base) / sub / "cuobjdump"
        if c.is_file():
            print(c)
            raise SystemExit
PY
)
fi
[ -n "$cuobjdump" ] || { echo "no cuobjdump (pip nvidia-cuda-cuobjdump)" >&2; exit 2; }

# the build module's argv, output and source swapped in; EXTRA_FLAGS before the source as it does
argv() {  # $1 source root, $2 output
  PYTHONPATH="$root" python - "$1" "$2" <<'PY'
import os, shlex, sys
from regress.native.build import COMMANDS, OUT
r = COMMANDS["cuda"]
extra = shlex.split(os.environ.get("EXTRA_FLAGS", ""))
out = []
for a in r.argv:
    if a == OUT:
        out.append(sys.argv[2])
    elif a == r.source:
        out += extra + [a]
    else:
        out.append(a)
print(shlex.join(out))
PY
}

dump() {  # $1 source root, $2 library, $3 dump
  (cd "$1" && eval "$(argv "$1" "$2")" >"$2.log" 2>&1) || { tail -20 "$2.log" >&2; exit 1; }
  "$cuobjdump" -sass "$2" >"$3"
}

old="$cache/$base-$tag.sass"
if [ ! -s "$old" ]; then
  src=$(mktemp -d)
  git archive "$base" kernel | tar -x -C "$src"
  dump "$src" "$src/lib.so" "$old"
  rm -rf "$src"
fi
new=$(mktemp -d)
dump "$root" "$new/lib.so" "$new/new.sass"
echo "base $base: $(wc -l <"$old") SASS lines, $(grep -c 'Function :' "$old") kernels"
echo "tree: $(wc -l <"$new/new.sass") SASS lines, $(grep -c 'Function :' "$new/new.sass") kernels"
diff "$old" "$new/new.sass" >"$new/diff" || true
head -40 "$new/diff"
echo "diff lines: $(wc -l <"$new/diff")"
# Kernel by kernel (issue 40: the tree adds kernels, and a larger fatbin's header says "compressed"):
# every kernel of the base against the tree's kernel of the same symbol. The last line: 0 changed
# means the base's machine code is all in the tree as it was.
python3 - "$old" "$new/new.sass" <<'PY'
import re, sys
def kernels(path):
    out, name = {}, None
    for line in open(path):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out
base, tree = kernels(sys.argv[1]), kernels(sys.argv[2])
missing = [k for k in base if k not in tree]
changed = [k for k in base if k in tree and base[k] != tree[k]]
new = [k for k in tree if k not in base]
for k in missing:
    print(f"missing in the tree: {k}")
for k in changed:
    print(f"changed: {k}")
print(f"new kernels: {len(new)}")
print(f"base kernels: {len(base)}, identical in the tree: {len(base) - len(missing) - len(changed)}, "
      f"changed: {len(changed)}, missing: {len(missing)}")
PY
