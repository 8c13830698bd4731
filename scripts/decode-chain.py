#!/usr/bin/env python3
"""A hybrid decode trace read layer by layer and token by token (device part slice-decode-timeline).

Usage: decode-chain.py TRACE.csv[.xz]
Reads a CUPTI or Nsight Systems cuda_gpu_trace CSV of a run with --decode-experts hybrid (or
cpu) and prints medians over its decode layers and tokens:
  per layer, from the MoE norm's end (the last rmsnorm kernel before the grouping): the host
  holding the grouping (the grouping kernel's end, or the end of the copies after it where they
  exist), the first expert copy over PCIe (> 1 MB), the copies' span, and from the last copy's
  end to the end of the device's wait for the CPU's experts (wait_host_word_kernel);
  per token, from the greedy token's kernel (argmax_take) to the token's download, the
  embedding kernel, the upload of the first Engram layer's rows and that layer's Engram kernel;
  and the token's own time (argmax to argmax).
Copies of up to 64 KiB run as kernels from 2026-12-07 on (copy_words_kernel, copy_rows_kernel:
engine/cuda/small_copy.cu), so a short download or upload is either a memcpy row of its size or
such a kernel; traces of either kind read the same.
The layers counted are those with a CPU wait (host-resident experts on the CPU) and at least
one copy.
"""
import statistics, sys

import trace_csv


def read(path):
    """(start, end, short name, bytes) of every row, by start."""
    return [(s, e, trace_csv.short_name(name), n_bytes) for s, e, name, n_bytes, *_ in trace_csv.read(path)]


def layers(rows):
    out = []
    for i, (s, e, name, _) in enumerate(rows):
        if "group_by_expert_kernel" not in name:
            continue
        j = i - 1
        while j > 0 and i - j < 12 and "rmsnorm_kernel" not in rows[j][2]:
            j -= 1
        if "rmsnorm_kernel" not in rows[j][2]:
            continue
        norm_end = rows[j][1]
        host = e
        for q in rows[i + 1:i + 4]:
            if "Device-to-Host" in q[2] and q[0] - e < 30000:
                host = q[1]
        first = last = wait = None
        for q in rows[i + 1:i + 80]:
            if "Host-to-Device" in q[2] and q[3] > 1_000_000:
                first = first if first is not None else q[0]
                last = q[1]
            if "wait_host_word" in q[2]:
                wait = q[1]
                break
        if first is None or wait is None:
            continue
        out.append(((host - norm_end) / 1e3, (first - norm_end) / 1e3, (last - first) / 1e3, (wait - last) / 1e3))
    return out


def tokens(rows):
    out, ends = [], []
    for i, (s, e, name, _) in enumerate(rows):
        if "argmax_take" not in name:
            continue
        ends.append(e)
        tok = emb = up = eng = None
        short_copy = lambda q: "copy_words_kernel" in q[2] or "memcpy" in q[2] and q[3] < 100_000
        for q in rows[i + 1:i + 40]:
            if tok is None and ("Device-to-Host" in q[2] and q[3] == 4 or "copy_words_kernel" in q[2]):
                tok = q[1]
            elif tok is not None and emb is None and "embed_kernel" in q[2]:
                emb = q[0]
            elif emb is not None and eng is None and short_copy(q):
                up = q[0]  # the last short copy before the Engram rows' dequantisation: the rows' upload
            elif up is not None and "dequant_kernel" in q[2]:
                eng = -1
            elif eng == -1 and "engram_kernel" in q[2]:
                eng = q[1]
                break
        if eng == -1:
            eng = None
        if None not in (tok, emb, up, eng):
            out.append(((tok - e) / 1e3, (emb - tok) / 1e3, (up - emb) / 1e3, (eng - up) / 1e3))
    return out, [(b - a) / 1e3 for a, b in zip(ends, ends[1:])]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = read(sys.argv[1])
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    ls = layers(rows)
    if ls:
        print(f"decode layers: {len(ls)} (medians, us)")
        for k, what in enumerate(("MoE norm's end to the host holding the grouping", "MoE norm's end to the first expert copy",
                                  "the copies' span", "the last copy's end to the CPU's experts' end (the device's wait)")):
            print(f"  {what}: {med(ls, k):.1f}")
    else:
        print("no decode layer with a CPU wait and a copy")
    ts, per_token = tokens(rows)
    if ts:
        print(f"tokens: {len(ts)} (medians, us)")
        for k, what in enumerate(("the greedy token's kernel to its download's end", "the download to the embedding kernel",
                                  "the embedding to the first Engram layer's rows' upload", "the upload to that layer's Engram kernel's end")):
            print(f"  {what}: {med(ts, k):.1f}")
    if per_token:
        print(f"a token (argmax to argmax, median of {len(per_token)}): {statistics.median(per_token):.1f} us")


if __name__ == "__main__":
    main()
