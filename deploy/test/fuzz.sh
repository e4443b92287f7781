#!/usr/bin/env bash
# Fuzzes what reaches the domain from outside with cargo-fuzz (libFuzzer): the purchase-token
# verifier, the order message decoder, the order-token parser (targets in fuzz/).
#
#   deploy/test/fuzz.sh [SECONDS] [TARGET...]     default: 300 s for each target in turn
#
# `make fuzz` runs the long default; `make test` a short run. cargo-fuzz is installed under
# $SECKILL_CACHE/tools on first use; the fuzz build goes to $SECKILL_CACHE/fuzz-target (it is
# instrumented, so it would only evict the main build from $CARGO_TARGET_DIR). Only the
# stable toolchain is here, and cargo-fuzz passes -Z flags: RUSTC_BOOTSTRAP=1 lets it.
#
# The committed seeds in fuzz/corpus/<target>/ are read, never written: what the fuzzer finds
# goes to .run/fuzz/corpus/<target>/, kept from run to run so that each run starts where the
# last stopped (fuzz/README.md says how to promote an input to the seeds). A crash, a timeout
# or an out-of-memory fails the run; the input is saved in fuzz/artifacts/<target>/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
seconds="${1:-300}"
shift || true
if [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS] [TARGET...]   (SECONDS is a whole number of seconds per target)" >&2
  exit 2
fi
targets=("$@")
((${#targets[@]} > 0)) || targets=(purchase_token order_message order_token)

cache="${SECKILL_CACHE:-${HOME}/.cache/seckill}"
cargo_fuzz_version="0.13.2"
cargo_fuzz_root="${cache}/tools/cargo-fuzz"
cargo_fuzz="${cargo_fuzz_root}/bin/cargo-fuzz"
scratch="${repo}/.run/fuzz"

if [[ ! -x $cargo_fuzz ]]; then
  echo "fuzz: installing cargo-fuzz ${cargo_fuzz_version} into ${cargo_fuzz_root}" >&2
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --root "$cargo_fuzz_root"
fi

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${cache}/fuzz-target"
cd "${repo}/fuzz"

echo "fuzz: building ${targets[*]} (into ${CARGO_TARGET_DIR})" >&2
for target in "${targets[@]}"; do
  "$cargo_fuzz" build "$target"
done

mkdir -p "$scratch"
failed=()
for target in "${targets[@]}"; do
  corpus="${scratch}/corpus/${target}"
  artifacts="${repo}/fuzz/artifacts/${target}"
  log="${scratch}/${target}.log"
  mkdir -p "$corpus" "$artifacts"
  started="${scratch}/${target}.started"
  touch "$started"
  echo "fuzz: ${target} for ${seconds} s (log: ${log#"${repo}/"})" >&2
  # The first corpus folder is the one libFuzzer adds to; the seeds come second.
  status=0
  "$cargo_fuzz" run "$target" "$corpus" "corpus/${target}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?

  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  per_second="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)"
  added="$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -n 1)"
  kept="$(find "$corpus" -type f | wc -l)"
  seeds="$(find "corpus/${target}" -type f | wc -l)"
  crashes=()
  while IFS= read -r -d '' artifact; do
    crashes+=("${artifact#"${repo}/fuzz/"}")
  done < <(find "$artifacts" -type f -newer "$started" -print0)
  rm -f "$started"

  if ((status == 0)) && ((${#crashes[@]} == 0)); then
    echo "fuzz: ${target}: ok, ${runs:-?} runs (${per_second:-?} exec/s), ${added:-?} new inputs;" \
      "corpus ${kept} found + ${seeds} seeds" >&2
    continue
  fi
  failed+=("$target")
  {
    echo "fuzz: ${target}: FAILED (cargo fuzz exited ${status}); from ${log#"${repo}/"}:"
    # The panic (or sanitizer report) and libFuzzer's verdict, else the end of the log.
    if ! grep -m 1 -A 2 "panicked at" "$log" && ! grep -m 1 -A 2 "==ERROR:\|== ERROR:" "$log"; then
      tail -n 30 "$log"
    fi | sed 's/^/    /'
    if ((${#crashes[@]} > 0)); then
      for artifact in "${crashes[@]}"; do
        echo "fuzz: ${target}: input saved as fuzz/${artifact}"
        echo "      reproduce: cd fuzz && RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=${CARGO_TARGET_DIR}" \
          "${cargo_fuzz} run ${target} ${artifact}"
      done
      echo "fuzz: fix the parser, then add the input as a regression test in crates/domain/tests/"
    else
      echo "fuzz: ${target}: no input was saved: the build or the fuzzer itself failed"
    fi
  } >&2
done

if ((${#failed[@]} > 0)); then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no crash in ${targets[*]} (${seconds} s each)" >&2
