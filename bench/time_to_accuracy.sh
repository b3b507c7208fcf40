#!/usr/bin/env bash
# Time to accuracy on slow links, both directions: 8 clients on all of Fashion-MNIST (CNN,
# IID, 30 local steps of 32 examples per round), each behind its own 1 Mbit/s link with
# 50 ms delay (fault proxies, --link rate=1mbit,delay=50ms), over the real protocol. Runs
# the uplink codecs fp32, 8-bit QSGD and top-1% (error feedback at the clients), each with
# the model going down as float32 and as 4-bit QSGD deltas (--downlink-codec; error
# feedback at the coordinator; with 8-bit QSGD up also 4-bit deltas on the bucket's largest
# magnitude, norm=linf), the same codes through the lossless zstd(...) stage, and LGC, and
# prints two markdown tables: the final accuracy with the bytes of each direction, and for
# 85% and 88% test accuracy the round, the wall seconds (sum of round times), the device
# seconds, and the uplink and downlink bytes spent to reach it. Device seconds are each
# round's wall time with the slowest client's local training replaced by its CPU seconds:
# what the round would take if every client trained on a core of its own instead of 8
# clients sharing this machine's cores (an estimate; the wall seconds are measured).
# Writes a JSON report per run and a plot (accuracy against wall seconds, device seconds
# and total bytes) into OUT (default build/bench-tta); runs already in OUT are kept and
# tabled. ONLY=<name>[,<name>...] runs those; ROUNDS (default 30); LINK (default
# rate=1mbit,delay=50ms) sets every client's link; BIN=<dir> takes the binaries from
# elsewhere (default build/bin). About 45 minutes on the 2-core build
# machine, most of it the float32 runs.
#   bench/time_to_accuracy.sh [OUT] [extra fedlgc-sim flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/bench-tta}
shift || true
mkdir -p "$out"
bin=${BIN:-build/bin}
rounds=${ROUNDS:-30}
common=(--clients 8 --rounds "$rounds" --model cnn --train-limit 60000 --local-steps 30
        --seed 1 --link "${LINK:-rate=1mbit,delay=50ms}" --quiet --bin-dir "$bin")
run() {  # name, uplink codec, downlink codec
  local name=$1 up=$2 down=$3
  shift 3
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then return; fi
  echo "== $name" >&2
  rm -rf "$out/$name.run" "$out/$name.json"
  "$bin/fedlgc-sim" "${common[@]}" --codec "$up" --downlink-codec "$down" \
    --run-dir "$out/$name.run" --report "$out/$name.json" "$@" | grep -v '^report:' >&2
}
q4="qsgd(bits=4)"
q4i="qsgd(bits=4,norm=linf)"  # 4-bit levels of each bucket's largest magnitude
run fp32__fp32 fp32 fp32 "$@"
run fp32__q4 fp32 "$q4" "$@"
run q8__fp32 "qsgd(bits=8)" fp32 "$@"
run q8__q4 "qsgd(bits=8)" "$q4" "$@"
run q8__q4i "qsgd(bits=8)" "$q4i" "$@"
run top1__fp32 "topk(ratio=0.01)" fp32 "$@"
run top1__q4 "topk(ratio=0.01)" "$q4" "$@"
# The same codes through a lossless Zstandard stage (zstd(...), docs/codecs.md).
run q8z__q4iz "zstd(qsgd(bits=8))" "zstd($q4i)" "$@"
run q4iz__q4iz "zstd($q4i)" "zstd($q4i)" "$@"
# LGC (docs/lgc.md), its default: compressed from the first round, a 5% support as a set and
# cells, 2-bit corrections, zstd.
run lgc__q4 "lgc()" "$q4" "$@"
# Debian's python3, where apt puts python3-matplotlib (scripts/setup.sh).
"${PYTHON:-/usr/bin/python3}" - "$out" "${LINK:-rate=1mbit,delay=50ms}" <<'PY'
import json, os, sys
out, link = sys.argv[1], dict(kv.split("=", 1) for kv in sys.argv[2].split(","))
names = ["fp32__fp32", "fp32__q4", "q8__fp32", "q8__q4", "q8__q4i", "top1__fp32", "top1__q4",
         "q8z__q4iz", "q4iz__q4iz", "lgc__q4"]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names if os.path.exists(f"{out}/{n}.json")}
if not runs:
    sys.exit(0)
MB = 1e6
def device(r):
    # The round with the slowest client's training at its CPU seconds (see the header).
    if "train_cpu_seconds_max" not in r:
        return None
    return r["seconds"] - r["train_seconds_max"] + r["train_cpu_seconds_max"]
def reach(rs, target):
    t = d = up = down = 0.0
    for r in rs:
        t += r["seconds"]; up += r["uplink_bytes"]; down += r["downlink_bytes"]
        d = None if d is None or device(r) is None else d + device(r)
        if (r["accuracy"] if r["accuracy"] is not None else -1) >= target:
            return r["round"], t, up, down, d
    return None
base = runs.get("fp32__fp32")
print("| uplink codec | downlink codec | final accuracy | vs fp32 both ways | uplink MB | fewer than fp32 | downlink MB | fewer than fp32 | wall s (rounds) |")
print("|---|---|---|---|---|---|---|---|---|")
for n, r in runs.items():
    c, s, rs = r["config"], r["summary"], r["rounds"]
    acc = s["final_accuracy"]
    vs = f"{100*(acc - base['summary']['final_accuracy']):+.2f} pt" if base else ""
    wall = sum(x["seconds"] for x in rs)
    print(f"| `{c['codec']}` | `{c['downlink_codec']}` | {100*acc:.2f}% | {vs} | "
          f"{s['uplink_bytes']/MB:.1f} | {s['compression_ratio']:.1f}x | "
          f"{s['downlink_bytes']/MB:.1f} | {s['downlink_ratio']:.1f}x | {wall:.0f} |")
print()
for target in (0.85, 0.88):
    b = reach(base["rounds"], target) if base else None
    print(f"To {100*target:.0f}% test accuracy:\n")
    print("| uplink codec | downlink codec | round | wall s | sooner than fp32 | device s | sooner than fp32 | uplink MB | downlink MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, r in runs.items():
        c = r["config"]
        got = reach(r["rounds"], target)
        if got is None:
            print(f"| `{c['codec']}` | `{c['downlink_codec']}` | not reached | | | | | | |")
            continue
        rnd, t, up, down, d = got
        sooner = f"{b[1]/t:.1f}x" if b else ""
        dev = f"{d:.0f}" if d is not None else "n/a"
        dsooner = f"{b[4]/d:.1f}x" if b and b[4] is not None and d is not None else ""
        print(f"| `{c['codec']}` | `{c['downlink_codec']}` | {rnd} | {t:.0f} | {sooner} | "
              f"{dev} | {dsooner} | {up/MB:.2f} | {down/MB:.2f} |")
    print()
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, (a1, a3, a2) = plt.subplots(1, 3, figsize=(17, 4.8))
for n, r in runs.items():
    rs = r["rounds"]
    t = up = d = 0.0
    xs, ds, bs, ys = [], [], [], []
    for x in rs:
        t += x["seconds"]; up += x["uplink_bytes"] + x["downlink_bytes"]
        d = None if d is None or device(x) is None else d + device(x)
        xs.append(t); ds.append(d); bs.append(up / MB); ys.append(100 * x["accuracy"])
    label = f"{r['config']['codec']} up, {r['config']['downlink_codec']} down"
    a1.plot(xs, ys, marker=".", label=label)
    if None not in ds:
        a3.plot(ds, ys, marker=".", label=label)
    a2.plot(bs, ys, marker=".", label=label)
for a, xl in ((a1, "wall seconds (sum of round times), 8 clients on 2 cores"),
              (a3, "device seconds (each client on a core of its own, estimate)"),
              (a2, "uplink + downlink MB, all clients")):
    a.set_xlabel(xl); a.set_ylabel("test accuracy (%)"); a.set_ylim(60, 92); a.grid(alpha=0.3)
    a.axhline(85, color="grey", lw=0.6); a.axhline(88, color="grey", lw=0.6)
a2.set_xscale("log")
a1.legend(fontsize=7, loc="lower right")
fig.suptitle(f"8 clients at {link.get('rate', 'unlimited')}, {link.get('delay', '0ms')} "
             "(Fashion-MNIST, CNN)")
fig.tight_layout()
fig.savefig(f"{out}/time_to_accuracy.png", dpi=110)
print(f"plot: {out}/time_to_accuracy.png")
PY
