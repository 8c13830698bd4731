#include "cpu/read_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace bg::cpu {

namespace {

uint64_t sum_words(const uint64_t* p, int64_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

// Each part's sum into its own cache line of `sums` (a line a part), which the caller keeps.
void read_once(ThreadPool* pool, const uint64_t* buf, int64_t n_words, uint64_t* sums) {
    if (!pool) {
        sums[0] += sum_words(buf, n_words);
        return;
    }
    const int parts = pool->size();
    const int64_t per = (n_words + parts - 1) / parts;
    pool->parallel_for(parts, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p * per, e = std::min(n_words, b + per);
            if (b < e) sums[p * 8] += sum_words(buf + b, e - b);
        }
    });
}

}  // namespace

double host_read_gb_s(ThreadPool* pool, const uint64_t* buf, int64_t n_words, int reps) {
    const int parts = pool ? pool->size() : 1;
    std::vector<uint64_t> sums(static_cast<size_t>(parts) * 8, 0);
    double best_s = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        read_once(pool, buf, n_words, sums.data());
        best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // The sums are used, as far as the compiler knows, so no read can be left out.
    __asm__ volatile("" : : "r"(sums.data()) : "memory");
    return static_cast<double>(n_words) * 8.0 / best_s / 1e9;
}

uint64_t host_read_pass(ThreadPool* pool, const uint64_t* buf, int64_t n_words) {
    std::vector<uint64_t> sums(static_cast<size_t>(pool ? pool->size() : 1) * 8, 0);
    read_once(pool, buf, n_words, sums.data());
    __asm__ volatile("" : : "r"(sums.data()) : "memory");
    return static_cast<uint64_t>(n_words) * 8;
}

}  // namespace bg::cpu
