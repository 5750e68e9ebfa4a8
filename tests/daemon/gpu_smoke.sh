#!/usr/bin/env bash
# GPU smoke test of the service: tandemd --gpu 0 serves a tiny random model through the CUDA
# backend, `tandem ps` names that backend, and greedy text equals the CPU backend's.
# Usage: tests/daemon/gpu_smoke.sh DIR   (DIR holds tandemd, tandem and tandem-model of a CUDA build)
set -euo pipefail
bin=$(realpath "${1:?usage: gpu_smoke.sh DIR-WITH-BINARIES}")
work=$(mktemp -d)
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/tandem-model" make --preset tiny --type Q8_0 --seed 7 -q -o "$work/tiny.gguf"
cpu=$("$bin/tandem-model" run -m "$work/tiny.gguf" -p "the quick brown fox" -n 48 --temp 0 2>/dev/null)
gpu=$("$bin/tandem-model" run -m "$work/tiny.gguf" -p "the quick brown fox" -n 48 --temp 0 --gpu 0 2>/dev/null)
[ "$cpu" == "$gpu" ] && echo "greedy 48 tokens, CPU == GPU: PASS" || { echo "greedy CPU != GPU: FAIL"; exit 1; }
"$bin/tandemd" --socket "$work/t.sock" --gpu 0 --model "default=$work/tiny.gguf" 2>"$work/d.log" &
pid=$!
for _ in $(seq 100); do [ -S "$work/t.sock" ] && break; sleep 0.1; done
"$bin/tandem" --socket "$work/t.sock" ps
served=$("$bin/tandem" --socket "$work/t.sock" run --temp 0 -n 48 "the quick brown fox")
echo "daemon: $served"
"$bin/tandem" --socket "$work/t.sock" --json ps | grep -q cuda && echo "daemon backend is CUDA: PASS" || {
  echo "daemon backend is not CUDA: FAIL"; cat "$work/d.log"; exit 1; }
