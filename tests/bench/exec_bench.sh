#!/usr/bin/env bash
# exec_bench.sh — end-to-end cost of `dsh exec` against the scripted replay provider.
#
# Run manually from anywhere in the repository (not part of CI; the release build takes minutes):
#
#     tests/bench/exec_bench.sh            # 15 measured runs per scenario (RUNS=N to change)
#
# What it does:
#   1. `cargo build --release -p dsh -p dsh-test-support --bins` (honours CARGO_TARGET_DIR).
#   2. Starts `dsh-replay-server --stateless` on 127.0.0.1 (stateless: the response is picked by
#      the number of assistant messages in the request, so every fresh session replays the same
#      script and one server serves every run).
#   3. Measures two scripted tasks through `dsh exec` (text mode, persistence ON — the default
#      JSONL store under a temporary $DSH_HOME):
#        2-step : the model reads one file, then answers;
#        10-step: nine tool calls (reads of nine files), then an answer.
#      One warm-up run per scenario, then RUNS measured runs.
#   4. Prints medians: wall time (ms, bash's $EPOCHREALTIME around the run), CPU time user+sys (ms, from
#      bash's `times` for the run's process tree — getrusage(RUSAGE_CHILDREN), ms resolution;
#      /usr/bin/time's own CPU fields only have 10 ms resolution), and peak RSS (MiB, "Maximum
#      resident set size" of `/usr/bin/time -v`). The "floor" row is the same harness around
#      `/usr/bin/time -v true`: subtract it to get dsh's own wall/CPU.
#      "per extra step" = (10-step − 2-step) / 8. The same two tasks with `--ephemeral` (no
#      persistence) separate the cost of the durable session log (fsync per batch/checkpoint).
#   BIN_DIR=/path/to/dir skips the build and uses the dsh / dsh-replay-server found there (e.g. a
#   debug build, to check the script itself).
#
# The project is a plain temporary directory (not a git repository); dsh-context still runs
# `git rev-parse` once per run to find that out (a child process, so its CPU is included in the
# CPU column). tests/bench/git_scale.sh measures the same 10-step task inside git repositories.
#
# Targets (from the binary issue): 2-step ≤ 25 ms wall and ≤ 20 MiB peak RSS; each extra tool
# step ≤ 2 ms CPU.
#
# Requirements: bash ≥ 5 (EPOCHREALTIME), GNU time at /usr/bin/time (Debian/Ubuntu: `apt-get install time`), cargo.
# Never touches the network beyond 127.0.0.1; the API key is a dummy.
set -euo pipefail

RUNS="${RUNS:-15}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="${BIN_DIR:-$TARGET_DIR/release}"

if [[ ! -x /usr/bin/time ]]; then
  echo "GNU time is missing: install it (apt-get install time)" >&2
  exit 2
fi

if [[ -z "${BIN_DIR:-}" ]]; then
  echo "building release binaries (target dir $TARGET_DIR) ..." >&2
  (cd "$ROOT" && cargo build --release --quiet -p dsh -p dsh-test-support --bins)
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

WORK="$(cd "$WORK" && pwd -P)"
PROJ="$WORK/proj"
mkdir -p "$PROJ" "$WORK/home-2" "$WORK/home-10" "$WORK/home-eph"
for i in 1 2 3 4 5 6 7 8 9; do
  printf 'file %s\nline two\nline three\n' "$i" > "$PROJ/f$i.txt"
done

# Script files: a JSON list of responses (format: crates/dsh-test-support/src/lib.rs).
{
  printf '[{"tool_calls":[["read",{"file_path":"%s/f1.txt"}]]},' "$PROJ"
  printf '{"text":"f1.txt holds three lines."}]\n'
} > "$WORK/two.json"
{
  printf '['
  for i in 1 2 3 4 5 6 7 8 9; do
    printf '{"tool_calls":[["read",{"file_path":"%s/f%s.txt"}]]},' "$PROJ" "$i"
  done
  printf '{"text":"All nine files hold three lines."}]\n'
} > "$WORK/ten.json"

# start_server SCRIPT → sets URL and SERVER_PID
start_server() {
  local out="$WORK/server.out"
  : > "$out"
  "$BIN/dsh-replay-server" "$1" --port 0 --stateless > "$out" 2> "$WORK/server.err" &
  SERVER_PID=$!
  for _ in $(seq 1 200); do
    if [[ -s "$out" ]]; then break; fi
    sleep 0.05
  done
  URL="$(head -n 1 "$out")"
  if [[ "$URL" != http://127.0.0.1:* ]]; then
    echo "replay server did not start: $(cat "$WORK/server.err")" >&2
    exit 1
  fi
}

stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# ms "0m0.123s" → microseconds
to_us() {
  local v="$1" m s
  m="${v%%m*}"
  s="${v#*m}"
  s="${s%s}"
  awk -v m="$m" -v s="$s" 'BEGIN { printf "%d", (m * 60 + s) * 1000000 }'
}

# measure_once HOME CMD... → appends "wall_us cpu_us rss_kb" to $SAMPLES
measure_once() {
  local home="$1"
  shift
  local t0 t1 line
  t0="${EPOCHREALTIME/./}"
  (
    DSH_HOME="$home" DEEPSEEK_BASE_URL="${URL:-http://127.0.0.1:9}" DEEPSEEK_API_KEY=bench-dummy-key \
      /usr/bin/time -v -o "$WORK/time.txt" "$@" > "$WORK/out.txt" 2> "$WORK/err.txt" || {
      echo "run failed: $* (see below)" >&2
      cat "$WORK/err.txt" "$WORK/time.txt" >&2
      exit 1
    }
    times > "$WORK/times.txt"
  )
  t1="${EPOCHREALTIME/./}"
  line="$(sed -n 2p "$WORK/times.txt")" # children: user sys
  local user sys
  user="$(to_us "${line%% *}")"
  sys="$(to_us "${line##* }")"
  local rss
  rss="$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$WORK/time.txt")"
  echo "$(( t1 - t0 )) $(( user + sys )) $rss" >> "$SAMPLES"
}

median_col() { # FILE COLUMN
  sort -n -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print v[int((NR + 1) / 2)] }'
}

declare -A WALL CPU RSS

# bench NAME SCRIPT HOME [EXEC FLAGS...] → fills WALL/CPU/RSS[NAME]
bench() {
  local name="$1" script="$2" home="$3"
  shift 3
  SAMPLES="$WORK/$name.samples"
  : > "$SAMPLES"
  if [[ "$script" == "-" ]]; then
    measure_once "$home" true
    : > "$SAMPLES"
    for _ in $(seq 1 "$RUNS"); do measure_once "$home" true; done
  else
    start_server "$script"
    (cd "$PROJ" && measure_once "$home" "$BIN/dsh" exec "$@" "summarize the files")
    grep -q "three lines" "$WORK/out.txt" || { echo "unexpected answer: $(cat "$WORK/out.txt")" >&2; exit 1; }
    : > "$SAMPLES"
    for _ in $(seq 1 "$RUNS"); do
      (cd "$PROJ" && measure_once "$home" "$BIN/dsh" exec "$@" "summarize the files")
    done
    stop_server
  fi
  WALL[$name]="$(median_col "$SAMPLES" 1)"
  CPU[$name]="$(median_col "$SAMPLES" 2)"
  RSS[$name]="$(median_col "$SAMPLES" 3)"
}

bench floor - "$WORK/home-2"
bench two "$WORK/two.json" "$WORK/home-2"
bench ten "$WORK/ten.json" "$WORK/home-10"
bench two_eph "$WORK/two.json" "$WORK/home-eph" --ephemeral
bench ten_eph "$WORK/ten.json" "$WORK/home-eph" --ephemeral

sessions2=$(find "$WORK/home-2" -name session.jsonl | wc -l)
sessions10=$(find "$WORK/home-10" -name session.jsonl | wc -l)

ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

echo
echo "dsh exec against the replay server — medians of $RUNS runs (persistence on; $(nproc) CPUs)"
echo "| scenario | wall ms | CPU ms (user+sys) | peak RSS MiB |"
echo "|---|---:|---:|---:|"
echo "| floor (/usr/bin/time true) | $(ms "${WALL[floor]}") | $(ms "${CPU[floor]}") | $(mib "${RSS[floor]}") |"
echo "| 2-step (read, answer) | $(ms "${WALL[two]}") | $(ms "${CPU[two]}") | $(mib "${RSS[two]}") |"
echo "| 10-step (9 reads, answer) | $(ms "${WALL[ten]}") | $(ms "${CPU[ten]}") | $(mib "${RSS[ten]}") |"
echo "| per extra step ((10-step − 2-step)/8) | $(ms $(( (WALL[ten] - WALL[two]) / 8 ))) | $(ms $(( (CPU[ten] - CPU[two]) / 8 ))) | — |"
echo "| 2-step --ephemeral (no persistence) | $(ms "${WALL[two_eph]}") | $(ms "${CPU[two_eph]}") | $(mib "${RSS[two_eph]}") |"
echo "| 10-step --ephemeral | $(ms "${WALL[ten_eph]}") | $(ms "${CPU[ten_eph]}") | $(mib "${RSS[ten_eph]}") |"
echo "| per extra step, --ephemeral | $(ms $(( (WALL[ten_eph] - WALL[two_eph]) / 8 ))) | $(ms $(( (CPU[ten_eph] - CPU[two_eph]) / 8 ))) | — |"
echo
echo "stored sessions: $sessions2 (2-step home), $sessions10 (10-step home)"
echo "targets: 2-step ≤ 25 ms wall, ≤ 20 MiB peak RSS; ≤ 2 ms CPU per extra tool step"
