#!/usr/bin/env bash
# Run HERE (the CPU machine), once per checkout, before the device run: puts what the H200 machine
# lacks into two git-ignored folders that the device call carries (`carry: [".whl", ".gpu"]`).
#   .whl/  Python wheels for the device's python3 3.12 (it has no package index): pydantic,
#          jsonschema, gguf and their compiled or missing dependencies (versions pinned to ours).
#   .gpu/  the llama.cpp b11434 CUDA build for sm_90 from ../shared/gpu (27 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
for d in .whl .gpu; do
    grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done
mkdir -p .whl .gpu
pip=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
     --platform any -d .whl)
"${pip[@]}" pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
    gguf==0.19.0 typing_extensions==4.16.0
tar=../shared/gpu/llama-cpp-b11434-cuda-sm90.tar.gz
[ -f "$tar" ] || { echo "missing $tar (the team's CUDA build)"; exit 1; }
cp -u "$tar" .gpu/
ls -la .whl .gpu
du -sh .whl .gpu
