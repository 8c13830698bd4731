"""A GPU trace's rows for the trace scripts (gpu-timeline.py, decode-chain.py): Nsight Systems'
cuda_gpu_trace CSV or the CUPTI tracer's, which writes the same columns, plain or xz-compressed.
Imported by name from the scripts' own folder (their hyphenated names cannot be imported)."""
import csv, io, lzma


def open_text(path):
    return io.TextIOWrapper(lzma.open(path), encoding="utf-8") if path.endswith(".xz") else open(path, encoding="utf-8")


def short_name(name):
    """A kernel's name without `(anonymous namespace)::` and its argument list."""
    return name.replace("(anonymous namespace)::", "").split("(")[0]


def _col(header, *keys):
    for i, h in enumerate(header):
        if all(k.lower() in h.lower() for k in keys):
            return i
    return None


def read(path):
    """The trace's rows sorted by start: (start_ns, end_ns, name, bytes, stream, is_kernel), the name
    as the trace gives it, bytes 0 for kernels (and where the trace has no such column)."""
    rows = list(csv.reader(open_text(path)))
    at = next(i for i, r in enumerate(rows) if r and any("Start" in c for c in r))
    header, rows = rows[at], rows[at + 1:]
    c_start, c_dur, c_name = _col(header, "start"), _col(header, "duration"), _col(header, "name")
    c_bytes, c_strm, c_grid = _col(header, "bytes"), _col(header, "strm"), _col(header, "grdx")
    out = []
    for r in rows:
        if len(r) <= max(c_start, c_dur, c_name):
            continue
        s, name = int(float(r[c_start])), r[c_name]
        kernel = c_grid is not None and r[c_grid].strip() not in ("", "0") and not name.startswith("[CUDA")
        n_bytes = int(float(r[c_bytes])) if c_bytes is not None and r[c_bytes].strip() else 0
        out.append((s, s + int(float(r[c_dur])), name, n_bytes, r[c_strm] if c_strm is not None else "?", kernel))
    out.sort()
    return out
