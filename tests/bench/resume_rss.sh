#!/usr/bin/env bash
# resume_rss.sh — peak memory of resuming a large session, against the memory its decoded events
# occupy once restored.
#
# Run manually from anywhere in the repository (not part of CI: it writes ~128 MB logs):
#
#     tests/bench/resume_rss.sh              # 128 MiB logs, both compositions (MIB=N to change)
#     KINDS=reads LOGS=/tmp/logs tests/bench/resume_rss.sh   # one composition; keep/reuse the logs
#
# What it does, for each log composition (`stream`: every turn streams a 20,000-byte `write`
# call and a 2,000-byte answer in 4-byte deltas; `reads`: every turn reads a 56,000-byte file):
#   1. `load_rss gen` writes a ~MIB MiB JSONL session (id `big`, cwd /bench/proj) under a temporary
#      $DSH_HOME/sessions (example `plugins/dsh-persistence-jsonl/examples/load_rss.rs`).
#   2. `load_rss resume` loads it in-process the way a resume does (`prepare`, then
#      `Session::from_restore`, then the history serialized as a request body) and prints the
#      decoded events' size (VmRSS after the restore minus before) and the peak (VmHWM minus the
#      same baseline) as a ratio. Target (issues 8 and 13): ≤ 1.5×.
#   3. `dsh exec --resume big "…"` against `dsh-replay-server` on 127.0.0.1 (one scripted answer),
#      under `/usr/bin/time -v`: its "Maximum resident set size", minus that of a fresh
#      `dsh exec` in the same home (the binary's own baseline), divided by the decoded events of
#      step 2, is the end-to-end ratio.
# Results: docs/benchmarks.md ("Resume memory").
#
# BIN_DIR=/path/to/dir uses the dsh, dsh-replay-server and examples/load_rss found there (e.g.
# target/debug after `cargo build -p dsh -p dsh-test-support --bins` and
# `cargo build -p dsh-persistence-jsonl --example load_rss`); without it a release build is made.
#
# Requirements: bash, GNU time at /usr/bin/time, cargo. Never touches the network beyond
# 127.0.0.1; the API key is a dummy.
set -euo pipefail

MIB="${MIB:-128}"
KINDS="${KINDS:-stream reads}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

if [[ ! -x /usr/bin/time ]]; then
  echo "GNU time is missing: install it (apt-get install time)" >&2
  exit 2
fi

if [[ -z "${BIN_DIR:-}" ]]; then
  echo "building release binaries (target dir $TARGET_DIR) ..." >&2
  (cd "$ROOT" && cargo build --release -q -p dsh -p dsh-test-support --bins \
    && cargo build --release -q -p dsh-persistence-jsonl --example load_rss)
  BIN_DIR="$TARGET_DIR/release"
fi
BIN_DIR="$(cd "$BIN_DIR" && pwd)"
DSH="$BIN_DIR/dsh"
REPLAY="$BIN_DIR/dsh-replay-server"
LOAD_RSS="$BIN_DIR/examples/load_rss"
for b in "$DSH" "$REPLAY" "$LOAD_RSS"; do
  [[ -x "$b" ]] || { echo "missing $b" >&2; exit 2; }
done

WORK="$(mktemp -d)"
REPLAY_PID=""
cleanup() {
  if [[ -n "$REPLAY_PID" ]]; then kill "$REPLAY_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo '[{"text":"ok"},{"text":"ok"}]' >"$WORK/script.json"

# Peak RSS (KiB) of `dsh ARGS…` in home $1 against the replay server at $2.
peak_kib() {
  local home="$1" url="$2"
  shift 2
  mkdir -p "$WORK/proj"
  (cd "$WORK/proj" && env -i PATH="$PATH" HOME="$home" DSH_HOME="$home" \
    DEEPSEEK_BASE_URL="$url" DEEPSEEK_API_KEY=sk-bench \
    /usr/bin/time -v "$DSH" "$@" 2>"$WORK/time.txt" >/dev/null) || {
    cat "$WORK/time.txt" >&2
    exit 1
  }
  awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.txt"
}

printf '%-8s %10s %10s %14s %12s %14s %10s\n' kind "log MiB" events "decoded MiB" "load ratio" "exec peak MiB" "exec ratio"
for kind in $KINDS; do
  # LOGS=DIR keeps the generated logs there and reuses them (a resume appends one turn).
  home="${LOGS:-$WORK}/home-$kind-$MIB"
  if [[ ! -d "$home/sessions" ]]; then
    mkdir -p "$home"
    "$LOAD_RSS" gen "$home/sessions" "$MIB" "$kind" >/dev/null
  fi
  log="$(find "$home/sessions" -path "*/big/session.jsonl")"
  log_mib=$(( $(stat -c %s "$log") >> 20 ))
  resume_line="$("$LOAD_RSS" resume "$home/sessions" | tail -1)"
  events="$(sed -E 's/.*events ([0-9]+);.*/\1/' <<<"$resume_line")"
  decoded="$(sed -E 's/.*decoded events ([0-9]+) KiB.*/\1/' <<<"$resume_line")"
  ratio="$(sed -E 's/.*ratio ([0-9.]+).*/\1/' <<<"$resume_line")"

  "$REPLAY" "$WORK/script.json" >"$WORK/url.txt" &
  REPLAY_PID=$!
  for _ in $(seq 50); do [[ -s "$WORK/url.txt" ]] && break; sleep 0.1; done
  url="$(head -1 "$WORK/url.txt")"
  fresh="$(peak_kib "$home" "$url" exec "hello")"
  resumed="$(peak_kib "$home" "$url" exec --resume big "one more turn")"
  kill "$REPLAY_PID"
  wait "$REPLAY_PID" 2>/dev/null || true
  REPLAY_PID=""
  : >"$WORK/url.txt"

  exec_ratio="$(awk -v r="$resumed" -v f="$fresh" -v d="$decoded" 'BEGIN {printf "%.2f", (r - f) / d}')"
  printf '%-8s %10s %10s %14s %12s %14s %10s\n' "$kind" "$log_mib" "$events" "$((decoded >> 10))" "$ratio" "$((resumed >> 10))" "$exec_ratio"
done
