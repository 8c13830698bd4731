#!/usr/bin/env python3
"""Per-kernel GPU time from an Nsight Compute raw CSV (--metrics gpu__time_duration.sum --csv
--page raw; plain or .xz), largest first: calls, total ms, share, mean us. Used for
measurements/slice/kernel-summary/ (device-reproduce.sh's slice-kernels part without nsys).
Note: ncu runs each kernel alone, with its clocks locked and caches flushed, so short kernels
read longer than they run inside the forward; the shares, not the absolute times, are the point."""
import collections, csv, io, lzma, re, sys


def rows(path):
    data = lzma.open(path, "rt") if path.endswith(".xz") else open(path, newline="")
    hdr = None
    for r in csv.reader(data):
        if r and r[0] == "ID":
            hdr = r
        elif hdr and r and r[0].isdigit():
            yield dict(zip(hdr, r))


def main(path):
    by = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in rows(path):
        name = re.split(r"\((?:bg::|const |float|int|unsigned)", r["Kernel Name"].replace("void ", ""))[0]
        ns = float(r["gpu__time_duration.sum"].replace(",", ""))
        by[name][0] += 1
        by[name][1] += ns
        total += ns
    print(f"{sum(c for c, _ in by.values())} kernels, {total / 1e6:.2f} ms in all (ncu: locked clocks, caches flushed)")
    print(f"{'ms':>9} {'share':>6} {'calls':>6} {'mean us':>8}  kernel")
    for name, (c, ns) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{ns / 1e6:9.2f} {100 * ns / total:5.1f}% {c:6d} {ns / c / 1e3:8.1f}  {name[:120]}")


if __name__ == "__main__":
    main(sys.argv[1])
