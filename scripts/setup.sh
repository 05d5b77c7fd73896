#!/usr/bin/env bash
# Installs regress and its runtime dependencies into the current Python (a venv is recommended).
# Torch: a vendor container (ROCm, CUDA) already has it; elsewhere the CPU build 2.13.0 is installed
# first, so the `torch>=2.4` requirement is met without pulling a multi-GB CUDA build. Set
# TORCH_CPU_INDEX to PyTorch's CPU wheel index (docs/install.md): a default index's Linux torch is
# the CUDA build (5.7 GB with ~15 NVIDIA packages, issue 42).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q torch==2.13.0 ${TORCH_CPU_INDEX:+--index-url "$TORCH_CPU_INDEX"}
fi
"$PY" -m pip install -q -e ".[postgres${REGRESS_EXTRAS:+,$REGRESS_EXTRAS}]"
"$PY" -c "import regress, torch; print(f'regress {regress.__version__} installed (torch {torch.__version__})')"
