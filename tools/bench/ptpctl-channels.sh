#!/usr/bin/env bash
# ptpctl bench through ptpd over each driver channel mode, interleaved: socket, ring, ... (5 each).
# usage: tools/bench/ptpctl-channels.sh BIN_DIR OUT_DIR   (BIN_DIR: target/release after
# `cargo build --release --workspace`; env N = reads per bench (20000), RUNS = rounds (5)).
# The README fast-path table's row D.
set -euo pipefail
bin=$1; out=$2; mkdir -p "$out"
run=$(mktemp -d)
"$bin/igcd" --emulate i225 --channel "$run/igc0.sock" --clock-page "$run/igc0.page" --name igc0 >"$run/igcd.log" 2>&1 &
igcd=$!
trap 'kill $igcd $ptpd 2>/dev/null; wait; cp "$run"/*.log "$out"/ 2>/dev/null; rm -rf "$run"' EXIT
ptpd=
for i in $(seq ${RUNS:-5}); do
  for mode in socket ring; do
    cat >"$run/ptpd.toml" <<T
socket = "$run/ptp.sock"
[[clock]]
name = "igc0"
channel = "$run/igc0.sock"
channel_mode = "$mode"
T
    "$bin/ptpd" -f "$run/ptpd.toml" >"$run/ptpd-$mode-$i.log" 2>&1 &
    ptpd=$!
    for _ in $(seq 50); do [ -S "$run/ptp.sock" ] && "$bin/ptpctl" --socket "$run/ptp.sock" get >/dev/null 2>&1 && break; sleep 0.1; done
    sleep 0.5
    "$bin/ptpctl" --socket "$run/ptp.sock" --json bench -n ${N:-20000} >"$out/bench-$mode-$i.json"
    echo "$mode $i: $(head -c 400 "$out/bench-$mode-$i.json")"
    kill $ptpd; wait $ptpd 2>/dev/null || true; rm -f "$run/ptp.sock"
  done
done
