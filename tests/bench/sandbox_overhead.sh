#!/usr/bin/env bash
# Overhead per bash call of each sandbox runner against an unconfined call: the median wall
# time of N runs of `bash -c true` spawned directly, under bubblewrap (the workspace-write
# profile dsh builds, network off) and under the Landlock helper (same grants, network off).
# Not run in CI; figures go to docs/benchmarks.md ("Sandbox").
#
# usage: tests/bench/sandbox_overhead.sh [N]   (builds the helper if needed; default N = 200)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N="${1:-200}"
cargo build --quiet -p dsh --bin dsh-landlock-run
HELPER="$PWD/target/debug/dsh-landlock-run"
WS="$(mktemp -d)"
trap 'rm -rf "$WS"' EXIT
python3 - "$N" "$HELPER" "$WS" <<'PY'
import shutil, statistics, subprocess, sys, time
n, helper, ws = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cmd = ["bash", "-c", "true"]
variants = {"unconfined": cmd}
if shutil.which("bwrap"):
    variants["bwrap"] = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-pid",
                         "--proc", "/proc", "--die-with-parent", "--unshare-net",
                         "--bind", ws, ws, "--bind", "/tmp", "/tmp", "--"] + cmd
variants["landlock"] = [helper, "--no-network", "--ro", "/", "--rw", "/dev/null",
                        "--rw", ws, "--rw", "/tmp", "--"] + cmd
base = None
print(f"{'runner':<12} {'median ms':>10} {'p90 ms':>8} {'overhead ms':>12}  (N = {n})")
for name, argv in variants.items():
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        times.append((time.perf_counter() - t) * 1000)
    med = statistics.median(times)
    p90 = statistics.quantiles(times, n=10)[-1]
    base = med if base is None else base
    print(f"{name:<12} {med:>10.2f} {p90:>8.2f} {med - base:>12.2f}")
PY
