#!/usr/bin/env bash
# Builds the runner image of a pinned stack from runners/docker/<stack>.Dockerfile, on top of the
# vendor base image that the pin names by tag AND digest ([container] image, digest).
#
#   bash runners/docker/build.sh STACK [--tag TAG]   build (refuses a pin without a digest)
#   bash runners/docker/build.sh STACK --resolve     pull the tag, print the digest to pin
#
# The built image is labelled with the stack and its digest, so `docker inspect` tells which pin it
# serves. CUDA stacks also need TORCH_INDEX (PyTorch's wheel index for that CUDA) in the environment.
set -euo pipefail

usage() { echo "usage: $0 STACK [--tag TAG] [--resolve]" >&2; exit 2; }
[ $# -ge 1 ] || usage
STACK=$1; shift
TAG="regress-$STACK:latest"
RESOLVE=0
while [ $# -gt 0 ]; do
  case $1 in
    --tag) TAG=${2:?}; shift 2 ;;
    --resolve) RESOLVE=1; shift ;;
    *) usage ;;
  esac
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PIN="${REGRESS_STACKS_DIR:-$ROOT/runners/stacks}/$STACK.toml"
RECIPE="$ROOT/runners/docker/$STACK.Dockerfile"
[ -f "$PIN" ] || { echo "build.sh: no pin $PIN" >&2; exit 2; }
[ -f "$RECIPE" ] || { echo "build.sh: no recipe $RECIPE" >&2; exit 2; }

# image, digest and stack digest from the pin (tomllib: Python >= 3.11 on the runner host).
read -r IMAGE DIGEST STACK_DIGEST < <(python3 - "$PIN" <<'PY'
import sys, tomllib
pin = tomllib.load(open(sys.argv[1], "rb"))
c = pin.get("container", {})
print(c.get("image") or "-", c.get("digest") or "-", pin.get("stack", {}).get("digest") or "-")
PY
)
[ "$IMAGE" != "-" ] || { echo "build.sh: $PIN has no [container] image" >&2; exit 2; }

if [ "$RESOLVE" = 1 ]; then
  docker pull "$IMAGE" >&2
  REPO_DIGEST=$(docker image inspect --format '{{index .RepoDigests 0}}' "$IMAGE")
  echo "put this into $PIN under [container]:"
  echo "digest = \"${REPO_DIGEST#*@}\""
  exit 0
fi

if ! [[ "$DIGEST" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "build.sh: $PIN pins $IMAGE without a digest; run '$0 $STACK --resolve' and commit the digest" >&2
  exit 2
fi

ARGS=(--build-arg "BASE_IMAGE=$IMAGE" --build-arg "BASE_DIGEST=$DIGEST")
if grep -q '^ARG TORCH_INDEX' "$RECIPE"; then
  ARGS+=(--build-arg "TORCH_INDEX=${TORCH_INDEX:?set TORCH_INDEX to the PyTorch wheel index for this CUDA}")
fi
docker build -f "$RECIPE" "${ARGS[@]}" \
  --label "org.regress.stack=$STACK" \
  --label "org.regress.base=$IMAGE@$DIGEST" \
  --label "org.regress.stack-digest=$STACK_DIGEST" \
  -t "$TAG" "$ROOT"
echo "$TAG"
