#!/usr/bin/env bash
# A bounded run of every fuzz target (issue 17): `fuzz/run.sh [SECONDS per target, default 20]`.
# `cargo xtask test` (the fuzz gate) calls it with 20; the longer run in the README used 300.
# Each target starts from its committed seeds (corpus/<target>, only read) and keeps what it
# finds in a temporary directory, so the committed corpus stays small. A panic or sanitizer
# report fails the run; libFuzzer leaves the input in artifacts/<target>/ (reproduce with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run -O -a <target> artifacts/<target>/crash-...`).
# -a: debug assertions, and with them overflow checks, so an arithmetic overflow on hostile
# input is a crash here rather than a silently wrapped value (a release build wraps).
# cargo-fuzz needs nightly features: RUSTC_BOOTSTRAP=1 on the stable toolchain. FUZZ_SANITIZER
# (default address; `none` where ASan does not link) is passed to cargo fuzz -s.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-20}
san=${FUZZ_SANITIZER:-address}
targets=(ipc_wire clock_request ptp_frame rx_ts_header ptpd_config mgmt_tlv
    proxy_proto pcid_channel ring_setup wire_datagram fault_command)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O -a -s "$san"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One fuzzer per core at a time (FUZZ_JOBS overrides), so eleven targets at 20 s each stay
# within CI's few minutes; each writes its own log and exit status.
jobs=${FUZZ_JOBS:-$(nproc)}
fuzz_one() {
    mkdir -p "$work/$1"
    local rc=0
    cargo fuzz run -O -a -s "$san" "$1" "$work/$1" "corpus/$1" -- \
        -max_total_time="$secs" -print_final_stats=1 >"$work/$1.log" 2>&1 || rc=$?
    echo "$rc" >"$work/$1.rc"
}
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    fuzz_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
    if [ "$(cat "$work/$t.rc" 2>/dev/null || echo none)" != 0 ]; then
        tail -n 60 "$work/$t.log"
        echo "fuzz/run.sh: $t failed (input in fuzz/artifacts/$t/)" >&2
        failed=1
        continue
    fi
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$work/$t.log")
    cov=$(grep -Eo 'cov: [0-9]+' "$work/$t.log" | tail -n 1)
    echo "fuzz $t: ${execs:-?} execs in ${secs} s, ${cov:-cov: ?}, $(ls "$work/$t" | wc -l) new inputs"
done
exit "$failed"
