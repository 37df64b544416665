#!/usr/bin/env bash
# The GPU machine's run for issue 28: one script, run once through the device tool, its figures under $OUT.
#
#   bash benchmarks/gpu/engines.sh          # from the checkout's root; OUT defaults to ./gpu-out
#
# 1. The NVML discovery and GPU-metrics tests against the real driver (they use recorded answers elsewhere).
# 2. The engines bench (benchmarks/bench_engines.py) with vLLM on one card: the agent installs vllm's CUDA
#    build itself, serves the tiny Llama of random weights, and the gateway's overhead in front of it is
#    measured. 3. The same with SGLang.
# Each step's output is kept; a step that fails does not stop the next.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 build.py test tests/agent/discovery tests/control/test_gpu_metrics.py > "$OUT/discovery.txt" 2>&1
echo "discovery tests: exit $?"
# What this machine's agent reports of its cards, as the leader's /metrics would export them.
.venv/bin/python -m llmgw doctor --json > "$OUT/doctor.json" 2>&1
for engine in vllm sglang; do
    timeout 1500 .venv/bin/python benchmarks/bench_engines.py --engine "$engine" --keep "$OUT/keep" \
        > "$OUT/bench-$engine.txt" 2> "$OUT/bench-$engine.err"
    echo "$engine bench: exit $?"
    grep "^engines_" "$OUT/bench-$engine.txt"
done
rm -rf "$OUT/keep"  # GBs of engines: not to come back
