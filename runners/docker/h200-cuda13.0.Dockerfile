# Runner image for the pinned stack h200-cuda13.0 (runners/stacks/h200-cuda13.0.toml).
# Build with `bash runners/docker/build.sh h200-cuda13.0`: it passes the base image and digest,
# and the FROM line below fails without a digest, so an unpinned base can never be built.
# The CUDA devel image brings nvcc 13.0 and cuDNN; torch is the cu130 build the pin names (its SDPA
# with the cuDNN and flash backends is the NVIDIA baseline), then regress's Python dependencies.
ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
ARG BASE_DIGEST
FROM ${BASE_IMAGE}@${BASE_DIGEST}

ARG TORCH_VERSION=2.11.0
# PyTorch's cu130 wheel index; build.sh passes $TORCH_INDEX (runners/README.md).
ARG TORCH_INDEX
ARG REGRESS_UID=1001

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Ubuntu 24.04's python3 is 3.12; a venv keeps pip off the system packages (PEP 668). Versions come
# from the base image's pinned Ubuntu snapshot, so apt pins would only repeat them (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev git g++ \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

RUN test -n "${TORCH_INDEX}" || { echo "pass --build-arg TORCH_INDEX (the cu130 wheel index)" >&2; exit 1; } \
    && pip install --no-cache-dir --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}" \
    && python3 -c 'import torch; assert torch.version.cuda.startswith("13.0"), torch.version.cuda'

COPY runners/docker/requirements.txt /tmp/regress-requirements.txt
RUN pip install --no-cache-dir -r /tmp/regress-requirements.txt && rm /tmp/regress-requirements.txt

RUN useradd --create-home --uid "${REGRESS_UID}" --shell /bin/bash regress \
    && mkdir -p /workspace /spool \
    && chown regress:regress /workspace /spool

# Numeric, so Kubernetes' runAsNonRoot and the host can verify it without /etc/passwd.
USER ${REGRESS_UID}
WORKDIR /workspace
ENV REGRESS_SPOOL_DIR=/spool
CMD ["python3", "-m", "regress", "--help"]
