#!/usr/bin/env python3
"""Where a pass's GPU time goes, from Nsight Systems' cuda_gpu_trace CSV (device part slice-timeline).

Usage: gpu-timeline.py TRACE.csv[.xz] [--window-ms W]
With --window-ms, only the activity in the last W ms of the trace is read (the warm pass of a run
made with --gen 0 ends the trace; W is its wall time from the run log). Prints, for kernels and for
copies: count, summed duration, the union of busy time (overlapping streams counted once), the
idle gaps of the GPU inside the window (kernel or copy running on no stream) by size, and the
kernels by name. The idle time plus the launches of kernels too short to fill the GPU are the part
of a pass that no SM count changes. With chained launches (programmatic dependent launch) a kernel
is placed while the one before runs and waits for it, so its duration holds that wait: the last
table takes each kernel's cost as the distance from the end of the kernel that ended before it to
its own end (distances over 60 us, the host's waits, left out).
"""
import statistics
import sys
from collections import defaultdict

import trace_csv

def union_ns(iv):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None: total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None: total += cur_e - cur_s
    return total

def gaps_ns(iv, lo, hi):
    out, t = [], lo
    for s, e in sorted(iv):
        if s > t: out.append(s - t)
        t = max(t, e)
    if hi > t: out.append(hi - t)
    return out

def main():
    args = sys.argv[1:]
    window_ms = None
    if "--window-ms" in args:
        i = args.index("--window-ms"); window_ms = float(args[i + 1]); del args[i:i + 2]
    if len(args) != 1: sys.exit(__doc__)
    ev = [(s, e, name, strm, kernel) for s, e, name, _, strm, kernel in trace_csv.read(args[0])]
    if not ev: sys.exit("no GPU activity in the trace")
    hi = max(e for _, e, *_ in ev)
    lo = min(s for s, *_ in ev) if window_ms is None else hi - int(window_ms * 1e6)
    ev = [x for x in ev if x[0] >= lo]
    kern = [x for x in ev if x[4]]
    copies = [x for x in ev if not x[4]]
    span = hi - lo
    print(f"window {span / 1e6:.2f} ms ({'last %.1f ms of the trace' % window_ms if window_ms else 'whole trace'})")
    for label, xs in (("kernels", kern), ("copies", copies)):
        if not xs: print(f"{label}: none"); continue
        print(f"{label}: {len(xs)} | summed {sum(e - s for s, e, *_ in xs) / 1e6:.2f} ms | busy (union) "
              f"{union_ns([(s, e) for s, e, *_ in xs]) / 1e6:.2f} ms | streams {len(set(x[3] for x in xs))}")
    allv = [(s, e) for s, e, *_ in ev]
    g = gaps_ns([(s, e) for s, e, *_ in kern], lo, hi)
    print(f"no kernel running: {sum(g) / 1e6:.2f} ms in {len(g)} gaps; of it no copy either: "
          f"{sum(gaps_ns(allv, lo, hi)) / 1e6:.2f} ms")
    for a, b in ((0, 5e3), (5e3, 20e3), (20e3, 100e3), (100e3, 1e6), (1e6, 1e12)):
        sel = [x for x in g if a <= x < b]
        print(f"  kernel gaps {a / 1e3:g}-{b / 1e3:g} us: {len(sel)} totalling {sum(sel) / 1e6:.2f} ms")
    short = [x for x in kern if x[1] - x[0] < 5000]
    print(f"kernels shorter than 5 us: {len(short)} totalling {sum(e - s for s, e, *_ in short) / 1e6:.2f} ms")
    by = defaultdict(lambda: [0, 0])
    for s, e, n, *_ in kern:
        k = trace_csv.short_name(n)[:90]
        by[k][0] += 1; by[k][1] += e - s
    print("kernels by name (count, ms, mean us):")
    for k, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {t / 1e6:8.2f} ms {n:6d} x {t / n / 1e3:8.1f} us  {k}")
    ends = sorted((e, n) for s, e, n, *_ in kern)
    cost = defaultdict(list)
    for (e0, _), (e1, n) in zip(ends, ends[1:]):
        if e1 - e0 < 60e3: cost[trace_csv.short_name(n)[:90]].append(e1 - e0)
    print("kernels by the distance of their end from the end before (count, ms, median us):")
    for k, v in sorted(cost.items(), key=lambda kv: -sum(kv[1]))[:25]:
        print(f"  {sum(v) / 1e6:8.2f} ms {len(v):6d} x {statistics.median(v) / 1e3:8.1f} us  {k}")

if __name__ == "__main__":
    main()
