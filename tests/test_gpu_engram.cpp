// Engram rows through the store on the GPU: fork-fp8 rows (two disk ranges a row, packed, decoded
// by the CUDA kernel) and Q8_0 rows land in device memory exactly as the CPU decodes the file.
// Skipped, visibly, where no GPU is present.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "cpu/thread_pool.h"
#include "cuda/cuda_device.cuh"
#include "cuda/dequant.cuh"
#include "io/reader.h"
#include "model/dsv41_model.h"
#include "model/engram_format.h"
#include "model_fixture.h"
#include "runtime/engram_store.h"
#include "util/file_io.h"

namespace {

using bg::dsv41::Model;

TEST(GpuEngram, StoreRowsEqualTheCpuDecodeBitForBit) {
    if (bg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (const char* format : {"fork-fp8", "q8_0"}) {
        SCOPED_TRACE(format);
        bg::ModelScale s = bg::parse_scale(bgtest::kTinyScale, "tiny");
        s.name = std::string("tiny-gpu-engram-") + format;
        s.engram_format = bg::parse_engram_format(format);
        const std::string path = bgtest::cached_model(s, 5);
        auto m = Model::open(path);
        const int64_t dim = m->hp().engram_dim;
        auto backend = bg::cuda::cuda_device().make_backend(bg::BackendOptions{});
        bg::cpu::ThreadPool pool(1);
        auto ops = bg::cuda::cuda_device().make_ops(pool);
        auto reader = bg::io::Reader::open(path, bg::io::IoConfig{});
        // A buffer of 7 rows, 3 in each staging half: 40 rows take 14 fetches, each refilling the
        // device buffer behind the last one's dequantisation, every half reused.
        bg::EngramStore store(*m, *backend, *reader, 7 * m->engram_row(m->hp().engram_layers[0], 0).bytes());
        std::mt19937_64 gen(std::random_device{}());
        const int64_t n = 40;
        float* out = static_cast<float*>(ops->alloc(n * dim * sizeof(float)));
        for (int64_t l : m->hp().engram_layers) {
            const bg::EngramFormat f = m->engram_format(l);
            EXPECT_EQ(f.name(), format);
            const uint64_t n_rows = static_cast<uint64_t>(m->layer(l).engram_embd->ne[1]);
            std::vector<uint64_t> rows(n);
            for (auto& r : rows) r = gen() % n_rows;
            rows[0] = n_rows - 1;
            store.fetch_rows(l, rows.data(), n, out, *ops);
            std::vector<float> got(n * dim), want(dim);
            ops->download(got.data(), out, got.size() * sizeof(float));
            ops->sync();
            std::vector<uint8_t> row(f.row_bytes(dim));
            for (int64_t i = 0; i < n; ++i) {
                const bg::EngramRowRanges rr = m->engram_row(l, rows[i]);
                bg::pread_exact(m->fd(rr.values.file), row.data(), rr.values.bytes, rr.values.offset, "test");
                if (rr.scales.bytes) bg::pread_exact(m->fd(rr.scales.file), row.data() + rr.values.bytes, rr.scales.bytes, rr.scales.offset, "test");
                bg::dequantize_engram_rows(f, row.data(), want.data(), 1, dim);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data() + i * dim, dim * sizeof(float))) << "row " << rows[i];
            }
        }
        ops->sync();
    }
}

}  // namespace
