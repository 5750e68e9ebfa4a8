#!/usr/bin/env bash
# Fuzz smoke test: builds the libFuzzer targets with clang (ASan + UBSan) in a separate build
# directory and runs the GGUF reader fuzzer for FUZZ_SECONDS, then the daemon's frame/request
# decoder fuzzer, tandem-http's OpenAI request mapping fuzzer, the tokenizer/chat fuzzer, the
# vocabulary fuzzer and the safetensors reader's fuzzer for half that each, each over a scratch
# copy of its seed corpus. Exits non-zero on a build failure or on any crash, leak, sanitizer report or timeout;
# the crashing input is kept under $FUZZ_BUILD_DIR/fuzz-artifacts/.
#
#   scripts/fuzz_smoke.sh                  # 60 s
#   FUZZ_SECONDS=600 scripts/fuzz_smoke.sh
#
# Environment: FUZZ_SECONDS (60), FUZZ_BUILD_DIR (build-fuzz), CC/CXX (clang-14/clang++-14),
# FUZZ_JOBS (1: parallel fuzzing processes), FUZZ_SOURCE_DIR (the repository root), FUZZ_SEED (1:
# a fixed seed, so that CI explores the same inputs each run; 0 picks one at random).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src=${FUZZ_SOURCE_DIR:-$root}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
cc=${CC:-clang-14}
cxx=${CXX:-clang++-14}
corpus_src=$root/tests/fuzz/corpus/gguf

for tool in "$cc" "$cxx" cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz_smoke: $tool not found" >&2; exit 2; }
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# The fuzz target is GTest-free, but tests/fuzz is reached through tests/, hence TANDEM_TESTS=ON;
# only the fuzz target is built.
mkdir -p "$build"
cmake -S "$src" -B "$build" "${generator[@]}" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTANDEM_FUZZ=ON -DTANDEM_CUDA=OFF -DTANDEM_TESTS=ON >"$build/fuzz-configure.log" 2>&1 || {
  cat "$build/fuzz-configure.log" >&2
  echo "fuzz_smoke: configure failed" >&2
  exit 2
}
cmake --build "$build" --target gguf_reader_fuzz fuzz_daemon_request fuzz_openai_request tokenizer_chat_fuzz \
  vocab_fuzz safetensors_fuzz
artifacts=$build/fuzz-artifacts
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# run_fuzzer TARGET CORPUS-DIR SECONDS
run_fuzzer() {
  local fuzzer work status=0
  fuzzer=$(find "$build" -type f -name "$1" -perm -u+x | head -n 1)
  [[ -n "$fuzzer" ]] || { echo "fuzz_smoke: $1 was not built" >&2; exit 2; }
  work=$(mktemp -d)
  cp -r "$2" "$work/corpus"
  echo "fuzz_smoke: running $1 for ${3}s over $(ls "$work/corpus" | wc -l) seeds"
  local args=(-seed="${FUZZ_SEED:-1}" -max_total_time="$3" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
              -print_final_stats=1 -artifact_prefix="$artifacts/")
  if [[ "$jobs" -gt 1 ]]; then
    args+=(-fork="$jobs" -ignore_crashes=0)
  fi
  "$fuzzer" "${args[@]}" "$work/corpus" || status=$?
  rm -rf "$work"
  if [[ $status -ne 0 ]]; then
    echo "fuzz_smoke: $1 FAILED (exit $status); reproduce with: $fuzzer $artifacts/<crash file>" >&2
    ls -l "$artifacts" >&2 || true
    exit 1
  fi
  echo "fuzz_smoke: $1 OK (${3}s, no crash)"
}

run_fuzzer gguf_reader_fuzz "$corpus_src" "$seconds"
run_fuzzer fuzz_daemon_request "$root/tests/daemon/fuzz/corpus" "$(( (seconds + 1) / 2 ))"
run_fuzzer fuzz_openai_request "$root/tests/client/tandem_http/fuzz/corpus" "$(( (seconds + 1) / 2 ))"
run_fuzzer tokenizer_chat_fuzz "$root/tests/fuzz/corpus/tokenizer_chat" "$(( (seconds + 1) / 2 ))"
run_fuzzer vocab_fuzz "$root/tests/fuzz/corpus/vocab" "$(( (seconds + 1) / 2 ))"
run_fuzzer safetensors_fuzz "$root/tests/fuzz/corpus/safetensors" "$(( (seconds + 1) / 2 ))"
