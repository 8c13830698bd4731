// Google Benchmark: disk-tier reads through io::Reader at several queue depths and read sizes,
// sequential (expert-sized ranges) and random 4 KiB pages (Engram rows). The file is made once
// under BG_BENCH_DIR (default: the current directory) and read with O_DIRECT.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "io/reader.h"
#include "util/rng.h"

namespace {

constexpr uint64_t kFileBytes = 1ull << 30;

const std::string& bench_file() {
    static const std::string path = [] {
        const char* dir = std::getenv("BG_BENCH_DIR");
        std::string p = std::string(dir ? dir : ".") + "/bg-bench-io.bin";
        if (::access(p.c_str(), R_OK) != 0) {
            const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            std::vector<uint8_t> buf(8 << 20);
            bg::Rng rng(7);
            for (uint64_t done = 0; done < kFileBytes; done += buf.size()) {
                for (size_t i = 0; i < buf.size(); i += 8) {
                    const uint64_t v = rng.next();
                    std::memcpy(&buf[i], &v, 8);
                }
                if (::write(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) std::abort();
            }
            ::fsync(fd);
            ::close(fd);
        }
        const int fd = ::open(p.c_str(), O_RDONLY);
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
        return p;
    }();
    return path;
}

// Expert-sized ranges (1.25 MB, the device scale's expert), back to back, all in flight at once.
void BM_ExpertReads(benchmark::State& st) {
    bg::io::IoConfig cfg;
    cfg.queue_depth = static_cast<uint32_t>(st.range(0));
    cfg.read_bytes = static_cast<uint32_t>(st.range(1));
    auto r = bg::io::Reader::open(bench_file(), cfg);
    const uint64_t expert = 1253376, n = 64;
    std::vector<uint8_t> dst(expert * n);
    std::vector<bg::io::ReadOp> ops(n);
    std::vector<bg::io::ReadOp*> done(n);
    uint64_t base = 0;
    for (auto _ : st) {
        for (uint64_t i = 0; i < n; ++i) {
            ops[i] = bg::io::ReadOp{};
            ops[i].offset = (base + i * expert + 17) % (kFileBytes - expert);  // unaligned, as in GGUF
            ops[i].bytes = expert;
            ops[i].dst = dst.data() + i * expert;
            r->submit(&ops[i]);
        }
        for (uint64_t got = 0; got < n;) got += r->poll(done.data(), n, true);
        base = (base + n * expert) % kFileBytes;
    }
    st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * n * expert));
}
BENCHMARK(BM_ExpertReads)->ArgsProduct({{1, 4, 16, 64}, {256 << 10, 1 << 20}})->UseRealTime();

// Random 4 KiB pages, as Engram rows are fetched.
void BM_RandomPages(benchmark::State& st) {
    bg::io::IoConfig cfg;
    cfg.queue_depth = static_cast<uint32_t>(st.range(0));
    auto r = bg::io::Reader::open(bench_file(), cfg);
    const uint64_t n = 256;
    std::vector<uint8_t> dst(n * 264);
    std::vector<bg::io::ReadOp> ops(n);
    std::vector<bg::io::ReadOp*> done(n);
    bg::Rng rng(3);
    for (auto _ : st) {
        for (uint64_t i = 0; i < n; ++i) {
            ops[i] = bg::io::ReadOp{};
            ops[i].offset = rng.below(kFileBytes / 4096) * 4096 + 100;
            ops[i].bytes = 264;
            ops[i].dst = dst.data() + i * 264;
            r->submit(&ops[i]);
        }
        for (uint64_t got = 0; got < n;) got += r->poll(done.data(), n, true);
    }
    st.counters["pages_per_s"] = benchmark::Counter(static_cast<double>(st.iterations() * n), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RandomPages)->Arg(1)->Arg(8)->Arg(32)->Arg(64)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
