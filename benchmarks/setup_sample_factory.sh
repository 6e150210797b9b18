#!/usr/bin/env bash
# Sample Factory 2.x in a venv of its own, for benchmarks/atari_throughput.py.
#
# sample-factory 2.1.1 pins gymnasium 0.29 and numpy < 2; flowrl needs gymnasium >= 1.0,
# so SF never goes into flowrl's environment. This makes (or completes) a venv at
# $SF_VENV (default /work/venvs/sf) with SF, ale-py (its wheel ships the ROMs),
# opencv-python-headless and the CPU build of torch 2.13.0: without the torch pin
# pip resolves a multi-GB CUDA build. Idempotent: a venv that already imports
# everything is left alone. Then:
#
#     python benchmarks/atari_throughput.py --sf-python "$SF_VENV/bin/python"
#
# Usage: bash benchmarks/setup_sample_factory.sh [VENV_DIR]
set -euo pipefail

SF_VENV="${1:-${SF_VENV:-/work/venvs/sf}}"
PY="${PYTHON:-python3}"
PROBE='from importlib.metadata import version
import sample_factory, sf_examples.atari.atari_utils, ale_py, cv2, torch, gymnasium
assert torch.version.cuda is None, "torch is a CUDA build"
print(*(f"{p} {version(p)}" for p in ("sample-factory", "torch", "gymnasium", "numpy", "ale-py")))'

if [[ -x "$SF_VENV/bin/python" ]] && "$SF_VENV/bin/python" -c "$PROBE" 2>/dev/null; then
    echo "Sample Factory venv ready: $SF_VENV/bin/python"
    exit 0
fi

mkdir -p "$(dirname "$SF_VENV")"
[[ -x "$SF_VENV/bin/python" ]] || "$PY" -m venv "$SF_VENV"

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
cat > "$constraints" <<PINS
torch==2.13.0
sample-factory==2.1.1
PINS

# The CPU wheel of torch first, so the resolver never reaches for the CUDA build
# (torch 2.13.0 on PyPI pulls several GB of nvidia-* wheels). pip finds it where it is
# set up to look (a local wheel directory or index); otherwise set
# SF_TORCH_INDEX=https://download.pytorch.org/whl/cpu. A plan without "+cpu" is refused.
"$SF_VENV/bin/pip" install --upgrade pip wheel >/dev/null
index_args=()
[[ -n "${SF_TORCH_INDEX:-}" ]] && index_args=(--extra-index-url "$SF_TORCH_INDEX")
plan="$("$SF_VENV/bin/pip" install --dry-run --no-deps --quiet --report - "${index_args[@]}" \
        -c "$constraints" "torch==2.13.0")"
if ! grep -q '"version": "2.13.0+cpu"' <<<"$plan"; then
    echo "pip would install a CUDA build of torch 2.13.0 here (no +cpu wheel found);" \
         "rerun with SF_TORCH_INDEX=https://download.pytorch.org/whl/cpu" >&2
    exit 1
fi
"$SF_VENV/bin/pip" install "${index_args[@]}" -c "$constraints" "torch==2.13.0"
"$SF_VENV/bin/pip" install -c "$constraints" sample-factory ale-py opencv-python-headless

"$SF_VENV/bin/python" -c "$PROBE"
echo "Sample Factory venv ready: $SF_VENV/bin/python"
