# Runner image for the ROCm 7.0 upgrade candidate mi300x-rocm7.0 (runners/stacks/mi300x-rocm7.0.toml).
# Build with `bash runners/docker/build.sh mi300x-rocm7.0`: it passes the pin's image and digest,
# and the FROM line below fails without a digest, so an unpinned base can never be built.
# The vendor image brings ROCm, hipcc and torch (all part of the stack); this adds AITER (the
# MI300X baseline) and regress's Python dependencies, and runs as a non-root user.
ARG BASE_IMAGE=rocm/pytorch:rocm7.0_ubuntu24.04_py3.12_pytorch_release_2.8.0
ARG BASE_DIGEST
FROM ${BASE_IMAGE}@${BASE_DIGEST}

# AITER release matching the pin's baseline_library; gfx942 only keeps the JIT prebuild short.
ARG AITER_REF=v0.1.5
ARG REGRESS_UID=1001

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GPU_ARCHS=gfx942

# regress needs Python >= 3.11 (tomllib); a py3.10 vendor tag fails here, not at 2 a.m.
RUN python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'

RUN git clone --filter=blob:none https://github.com/ROCm/aiter.git /opt/aiter \
    && git -C /opt/aiter checkout --quiet "${AITER_REF}" \
    && git -C /opt/aiter submodule update --init --recursive --depth 1 \
    && pip install --no-cache-dir /opt/aiter \
    && python3 -c 'import aiter' \
    && rm -rf /opt/aiter/.git

COPY runners/docker/requirements.txt /tmp/regress-requirements.txt
RUN pip install --no-cache-dir -r /tmp/regress-requirements.txt && rm /tmp/regress-requirements.txt

# GPU access for a non-root user: /dev/kfd and /dev/dri/renderD* belong to video and render.
# The host's render GID may differ; docker run adds it with --group-add (runners/README.md).
RUN groupadd --force render \
    && useradd --create-home --uid "${REGRESS_UID}" --groups video,render --shell /bin/bash regress \
    && mkdir -p /workspace /spool \
    && chown regress:regress /workspace /spool

# Numeric, so Kubernetes' runAsNonRoot and the host can verify it without /etc/passwd.
USER ${REGRESS_UID}
WORKDIR /workspace
ENV REGRESS_SPOOL_DIR=/spool
CMD ["python3", "-m", "regress", "--help"]
