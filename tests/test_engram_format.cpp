// Engram tables in every format a published file uses (model/engram_format.h): a dequantisable
// type, and the fork-fp8 pair of tarruda/llama.cpp's converter (FP8-E4M3 bytes in an I8 tensor,
// E8M0 scales per 32 values in a second I8 tensor).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "cli_fixture.h"
#include "cpu/cpu_ops.h"
#include "cpu/thread_pool.h"
#include "gguf_edit.h"
#include "io/reader.h"
#include "model/dsv41_forward.h"
#include "model/dsv41_model.h"
#include "model/engram_format.h"
#include "model_fixture.h"
#include "runtime/engram_store.h"
#include "runtime/providers.h"
#include "runtime/runner.h"
#include "tensor/fp8_rows.h"
#include "util/check.h"
#include "util/file_io.h"

namespace {

using bg::EngramFormat;
using bg::GgmlType;
using bg::dsv41::Model;

TEST(EngramFormat, ParsesTypesAndTheForkFormatOnly) {
    EXPECT_EQ(bg::parse_engram_format("q8_0"), EngramFormat::typed(GgmlType::Q8_0));
    EXPECT_EQ(bg::parse_engram_format("bf16"), EngramFormat::typed(GgmlType::BF16));
    EXPECT_EQ(bg::parse_engram_format("mxfp4"), EngramFormat::typed(GgmlType::MXFP4));
    EXPECT_EQ(bg::parse_engram_format("fork-fp8"), EngramFormat::fork_fp8());
    EXPECT_EQ(bg::parse_engram_format("fork-fp8").row_bytes(256), 264u);
    EXPECT_EQ(bg::parse_engram_format("q8_0").row_bytes(256), 272u);
    // I8 is raw bytes: no table is "i8" by itself.
    EXPECT_THROW(bg::parse_engram_format("i8"), bg::Error);
    EXPECT_THROW(bg::parse_engram_format("fp8"), bg::Error);
    EXPECT_FALSE(EngramFormat::fork_fp8().row_fits(48));
}

// ---- whole files ----------------------------------------------------------------------------

bg::ModelScale tiny_scale(const char* name, const char* engram_format) {
    bg::ModelScale s = bg::parse_scale(bgtest::kTinyScale, "tiny");
    s.name = name;
    s.engram_format = bg::parse_engram_format(engram_format);
    return s;
}

const uint64_t kSeed = 5;
std::string q8_model() { return bgtest::cached_model(tiny_scale("tiny-engram-q8_0", "q8_0"), kSeed); }
std::string fork_model() { return bgtest::cached_model(tiny_scale("tiny-engram-fork-fp8", "fork-fp8"), kSeed); }

// Every row of one table, dequantised on the host from the file's bytes.
std::vector<float> table_rows(const Model& m, int64_t layer) {
    const int64_t dim = m.hp().engram_dim;
    const uint64_t rows = static_cast<uint64_t>(m.layer(layer).engram_embd->ne[1]);
    const EngramFormat f = m.engram_format(layer);
    std::vector<float> out(rows * dim);
    std::vector<uint8_t> row(f.row_bytes(dim));
    for (uint64_t r = 0; r < rows; ++r) {
        const bg::EngramRowRanges rr = m.engram_row(layer, r);
        bg::pread_exact(m.fd(rr.values.file), row.data(), rr.values.bytes, rr.values.offset, "test");
        if (rr.scales.bytes) bg::pread_exact(m.fd(rr.scales.file), row.data() + rr.values.bytes, rr.scales.bytes, rr.scales.offset, "test");
        bg::dequantize_engram_rows(f, row.data(), out.data() + r * dim, 1, dim);
    }
    return out;
}

TEST(EngramFiles, MakeModelWritesTheForkPairAndLeavesEveryOtherTensorAsInTheQ8File) {
    const bg::gguf::Reader q8 = bg::gguf::Reader::open(q8_model());
    const bg::gguf::Reader fk = bg::gguf::Reader::open(fork_model());
    auto m = Model::open(fork_model());
    const int64_t dim = m->hp().engram_dim;
    for (int64_t l : m->hp().engram_layers) {
        const std::string v = bg::dsv41::layer_tensor_name(l, "engram_embd"), s = bg::dsv41::layer_tensor_name(l, "engram_embd_scale");
        ASSERT_NE(fk.tensor(v), nullptr);
        ASSERT_NE(fk.tensor(s), nullptr);
        EXPECT_EQ(fk.tensor(v)->type, GgmlType::I8);
        EXPECT_EQ(fk.tensor(s)->type, GgmlType::I8);
        EXPECT_EQ(fk.tensor(v)->ne, (std::vector<int64_t>{dim, q8.tensor(v)->ne[1]}));
        EXPECT_EQ(fk.tensor(s)->ne, (std::vector<int64_t>{dim / 32, q8.tensor(v)->ne[1]}));
        EXPECT_EQ(q8.tensor(s), nullptr);
        EXPECT_TRUE(m->engram_format(l).fork());
    }
    // Every other tensor: the same bytes (make-model draws it from the same seed).
    const int fq = ::open(q8_model().c_str(), O_RDONLY), ff = ::open(fork_model().c_str(), O_RDONLY);
    int compared = 0;
    for (const bg::gguf::TensorInfo& t : q8.tensors()) {
        if (t.name.find("engram_embd") != std::string::npos) continue;
        const bg::gguf::TensorInfo* u = fk.tensor(t.name);
        ASSERT_NE(u, nullptr) << t.name;
        ASSERT_EQ(u->n_bytes, t.n_bytes) << t.name;
        std::vector<uint8_t> a(t.n_bytes), b(t.n_bytes);
        bg::pread_exact(fq, a.data(), a.size(), t.file_offset, "test");
        bg::pread_exact(ff, b.data(), b.size(), u->file_offset, "test");
        EXPECT_EQ(a, b) << t.name;
        ++compared;
    }
    ::close(fq);
    ::close(ff);
    EXPECT_GT(compared, 50);
}

// The fork-fp8 table and a Q8_0 table made from the same floats x agree within the two
// formats' rounding. Per group of 32 with largest magnitude A:
//   fork: the scale s is a power of two with A/s in (224, 448], so x/s rounds to E4M3 with
//         |error| <= 2^-4 |x| (3 mantissa bits, normals) or <= 2^-10 s < 2^-17.8 A (subnormals);
//   Q8_0: d = A/127 rounded to FP16, q = round(x/d) clamped to 127: |error| <= d/2 + 127 |d - A/127|
//         <= A/254 + A 2^-11.
// With |x| <= |q8| + A (1/254 + 2^-11), |fork - q8| <= 2^-4 |q8| + A (2^-4 + 1)(1/254 + 2^-11) +
// 2^-17.8 A < 2^-4 |q8| + 0.00476 A; A is at most max |q8| + A (1/254 + 2^-11), so the bound
// asserted, 2^-4 |q8| + 0.0048 max|q8|, holds with room for both. A scale off by a factor of 2,
// a wrong group or a wrong row breaks it by far.
TEST(EngramFiles, ForkTableGivesTheQ8RowsWithinFp8Rounding) {
    auto mq = Model::open(q8_model());
    auto mf = Model::open(fork_model());
    for (int64_t l : mq->hp().engram_layers) {
        const std::vector<float> a = table_rows(*mq, l), b = table_rows(*mf, l);
        ASSERT_EQ(a.size(), b.size());
        double worst = 0, mean_abs_diff = 0;
        for (size_t g = 0; g < a.size() / 32; ++g) {
            double gmax = 0;
            for (size_t j = 0; j < 32; ++j) gmax = std::max(gmax, std::fabs(static_cast<double>(a[g * 32 + j])));
            for (size_t j = 0; j < 32; ++j) {
                const size_t i = g * 32 + j;
                const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
                const double bound = 0.0625 * std::fabs(static_cast<double>(a[i])) + 0.0048 * gmax;
                worst = std::max(worst, d / bound);
                mean_abs_diff += d;
                ASSERT_LE(d, bound) << "layer " << l << " element " << i << ": q8 " << a[i] << " fork " << b[i];
            }
        }
        mean_abs_diff /= a.size();
        // The two are different roundings of N(0, 1) values: close, not equal.
        EXPECT_GT(mean_abs_diff, 1e-4);
        EXPECT_LT(mean_abs_diff, 0.05);
        std::printf("layer %lld: worst |fork - q8| / bound %.3f, mean |fork - q8| %.5f\n", (long long)l, worst, mean_abs_diff);
    }
}

// Both providers give every row as the host decode of the file does, bit for bit: the plain
// pread one, and the store (O_DIRECT reads of two ranges per row, packed, dequantised by the ops).
TEST(EngramFiles, ProvidersReadForkRowsExactly) {
    auto m = Model::open(fork_model());
    bg::cpu::ThreadPool pool(2);
    auto ops = bg::cpu::make_cpu_ops(pool);
    auto backend = bg::make_cpu_backend();
    auto reader = bg::io::Reader::open(fork_model(), bg::io::IoConfig{});
    const int64_t dim = m->hp().engram_dim;
    // A buffer of 5 rows: 24 rows take several fetches.
    bg::EngramStore store(*m, *backend, *reader, 5 * bg::fp8::packed_row_bytes(dim));
    bg::PreadEngramProvider plain(*m);
    std::mt19937_64 gen(std::random_device{}());
    for (int64_t l : m->hp().engram_layers) {
        const std::vector<float> all = table_rows(*m, l);
        const uint64_t n_rows = all.size() / dim;
        std::vector<uint64_t> rows(24);
        for (auto& r : rows) r = gen() % n_rows;
        rows[3] = n_rows - 1;  // the last row of both tensors
        std::vector<float> a(rows.size() * dim), b(rows.size() * dim);
        store.fetch_rows(l, rows.data(), static_cast<int64_t>(rows.size()), a.data(), *ops);
        ops->sync();
        plain.fetch_rows(l, rows.data(), static_cast<int64_t>(rows.size()), b.data(), *ops);
        for (size_t i = 0; i < rows.size(); ++i) {
            const float* want = all.data() + rows[i] * dim;
            EXPECT_EQ(0, std::memcmp(want, a.data() + i * dim, dim * 4)) << "store, row " << rows[i];
            EXPECT_EQ(0, std::memcmp(want, b.data() + i * dim, dim * 4)) << "pread, row " << rows[i];
        }
    }
    // 24 rows of 32 values and 1 scale byte each, per table.
    EXPECT_EQ(store.counters().row_bytes, 2u * 24u * static_cast<uint64_t>(bg::fp8::packed_row_bytes(dim)));
}

// Read-ahead: rows offered before a fetch come from the ring, the same bytes as rows read by the
// fetch; a ring smaller than a fetch gives what it holds and the fetch reads the rest; rows
// offered and then not asked for in their turn are dropped (counted), never handed to a fetch
// of other rows.
TEST(EngramFiles, StoreReadAheadGivesTheSameRowsAndDropsWhatNoFetchAsked) {
    auto m = Model::open(fork_model());
    bg::cpu::ThreadPool pool(2);
    auto ops = bg::cpu::make_cpu_ops(pool);
    auto backend = bg::make_cpu_backend();
    bg::io::IoConfig io;
    io.queue_depth = 4;  // fewer reads in flight than the ring holds: the rest start on later polls
    auto reader = bg::io::Reader::open(fork_model(), io);
    const int64_t dim = m->hp().engram_dim;
    const uint64_t row = bg::fp8::packed_row_bytes(dim);
    bg::EngramStore store(*m, *backend, *reader, 5 * row, 9 * row + row / 2);
    ASSERT_EQ(store.ahead_capacity(), 9);
    std::mt19937_64 gen(std::random_device{}());
    const std::vector<int64_t>& layers = m->hp().engram_layers;
    ASSERT_GE(layers.size(), 2u);
    auto check = [&](int64_t l, const std::vector<uint64_t>& rows, const char* what) {
        const std::vector<float> all = table_rows(*m, l);
        std::vector<float> got(rows.size() * dim);
        store.fetch_rows(l, rows.data(), static_cast<int64_t>(rows.size()), got.data(), *ops);
        ops->sync();
        for (size_t i = 0; i < rows.size(); ++i)
            ASSERT_EQ(0, std::memcmp(all.data() + rows[i] * dim, got.data() + i * dim, dim * 4))
                << what << ", layer " << l << ", row " << rows[i];
    };
    auto draw = [&](int64_t l, size_t n) {
        const uint64_t n_rows = table_rows(*m, l).size() / dim;
        std::vector<uint64_t> r(n);
        for (auto& x : r) x = gen() % n_rows;
        return r;
    };
    const int64_t l0 = layers[0], l1 = layers[1];

    // 24 rows offered, 9 taken: the fetch takes those 9 from the ring and reads 15.
    const std::vector<uint64_t> a = draw(l0, 24);
    EXPECT_EQ(store.read_ahead(l0, a.data(), 24), 9);
    EXPECT_EQ(store.read_ahead(l0, a.data() + 9, 15), 0) << "the ring is full";
    check(l0, a, "partly read ahead");
    bg::EngramCounters c = store.counters();
    EXPECT_EQ(c.rows, 24u);
    EXPECT_EQ(c.rows_read_ahead, 9u);
    EXPECT_EQ(c.rows_discarded, 0u);

    // Offered for two fetches of different layers, in their order: all from the ring.
    const std::vector<uint64_t> b0 = draw(l0, 4), b1 = draw(l1, 5);
    EXPECT_EQ(store.read_ahead(l0, b0.data(), 4), 4);
    EXPECT_EQ(store.read_ahead(l1, b1.data(), 5), 5);
    EXPECT_EQ(store.read_ahead(0, nullptr, 0), 0);
    check(l0, b0, "read ahead, first of two");
    check(l1, b1, "read ahead, second of two");
    c = store.counters();
    EXPECT_EQ(c.rows_read_ahead, 18u);
    EXPECT_EQ(c.rows_discarded, 0u);

    // A fetch that asks for the first 3 offered rows, then others: 3 from the ring, the other 5
    // offered are dropped, and its own rows are read.
    std::vector<uint64_t> d = draw(l1, 8), e = d;
    for (size_t i = 3; i < e.size(); ++i) e[i] = (e[i] + 1) % (table_rows(*m, l1).size() / dim);
    EXPECT_EQ(store.read_ahead(l1, d.data(), 8), 8);
    check(l1, e, "diverging after three rows");
    c = store.counters();
    EXPECT_EQ(c.rows_read_ahead, 21u);
    EXPECT_EQ(c.rows_discarded, 5u);

    // Rows of another layer at the front: none of them is handed to this fetch.
    EXPECT_EQ(store.read_ahead(l0, d.data(), 8), 8);
    check(l1, d, "another layer's rows offered");
    c = store.counters();
    EXPECT_EQ(c.rows_read_ahead, 21u);
    EXPECT_EQ(c.rows_discarded, 13u);
    EXPECT_EQ(c.rows, 24u + 4u + 5u + 8u + 8u);
    // Dropped rows were read as well.
    EXPECT_GE(c.disk_read_bytes, (c.rows + c.rows_discarded) * row);
}

// ---- hostile files: the fork pair broken one way at a time ----------------------------------

std::string open_error(const std::string& path) {
    try {
        Model::open(path);
    } catch (const bg::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
        return msg;
    }
    return "";
}

std::string edited(const bgtest::GgufEdit& e, const std::string& name) {
    const std::string out = bgtest::test_models_dir() + "/engram-edit-" + name + ".gguf";
    e.write(out);
    return out;
}

const char* kValues = "blk.1.engram_embd.weight";
const char* kScales = "blk.1.engram_embd_scale.weight";

TEST(EngramFiles, UnmodifiedForkCopyLoads) {
    EXPECT_EQ(open_error(edited(bgtest::GgufEdit(fork_model()), "none")), "");
}

TEST(EngramFiles, MissingScalesTensorIsAClearError) {
    bgtest::GgufEdit e(fork_model());
    e.remove_tensor(kScales);
    EXPECT_EQ(open_error(edited(e, "no-scales")),
              "model: tensor 'blk.1.engram_embd.weight' is i8 (the FP8-E4M3 bytes of a fork-fp8 Engram table) but its "
              "E8M0 scales tensor 'blk.1.engram_embd_scale.weight' is missing");
}

TEST(EngramFiles, WrongScalesShapeIsAClearError) {
    bgtest::GgufEdit e(fork_model());
    const int64_t rows = e.source().tensor(kValues)->ne[1];
    // Two scales a row (one per 16 values), and one row too few.
    e.remove_tensor(kScales).add_tensor(kScales, {2, rows}, GgmlType::I8, std::vector<uint8_t>(2 * rows, 127));
    EXPECT_EQ(open_error(edited(e, "scales-shape")),
              bg::strf("model: tensor '%s' has shape {2, %lld}, expected {1, %lld}", kScales, (long long)rows, (long long)rows));
    bgtest::GgufEdit f(fork_model());
    f.remove_tensor(kScales).add_tensor(kScales, {1, rows - 1}, GgmlType::I8, std::vector<uint8_t>(rows - 1, 127));
    EXPECT_EQ(open_error(edited(f, "scales-rows")),
              bg::strf("model: tensor '%s' has shape {1, %lld}, expected {1, %lld}", kScales, (long long)rows - 1,
                       (long long)rows));
}

TEST(EngramFiles, ValuesOfAnotherTypeBesideScalesAreAClearError) {
    bgtest::GgufEdit e(fork_model());
    const int64_t rows = e.source().tensor(kValues)->ne[1];
    e.retype_tensor(kValues, GgmlType::Q8_0, std::vector<uint8_t>(rows * 34, 0));
    EXPECT_EQ(open_error(edited(e, "values-q8")),
              "model: tensor 'blk.1.engram_embd.weight' has type q8_0, but beside 'blk.1.engram_embd_scale.weight' (E8M0 "
              "scales) it must be i8 (FP8-E4M3 bytes)");
}

TEST(EngramFiles, ScalesOfAnotherTypeAreRefused) {
    bgtest::GgufEdit e(fork_model());
    const int64_t rows = e.source().tensor(kValues)->ne[1];
    e.retype_tensor(kScales, GgmlType::F32, std::vector<uint8_t>(rows * 4, 0));
    EXPECT_EQ(open_error(edited(e, "scales-f32")),
              bg::strf("model: tensor '%s' has type f32, which is not allowed for it", kScales));
}

// I8 is taken only as the fork pair: not as a dense weight, not as a table of its own.
TEST(EngramFiles, I8IsRefusedEverywhereElse) {
    bgtest::GgufEdit e(q8_model());
    const bg::gguf::TensorInfo* kv = e.source().tensor("blk.0.attn_kv.weight");
    e.retype_tensor(kv->name, GgmlType::I8, std::vector<uint8_t>(kv->n_elems, 0));
    EXPECT_EQ(open_error(edited(e, "dense-i8")), "model: tensor 'blk.0.attn_kv.weight' has type i8, which is not allowed for it");
    bgtest::GgufEdit f(q8_model());
    const bg::gguf::TensorInfo* ex = f.source().tensor("blk.2.ffn_up_exps.weight");
    f.retype_tensor(ex->name, GgmlType::I8, std::vector<uint8_t>(ex->n_elems, 0));
    EXPECT_EQ(open_error(edited(f, "experts-i8")), "model: tensor 'blk.2.ffn_up_exps.weight' has type i8, which is not allowed for it");
    // A scales tensor where there is no Engram table.
    bgtest::GgufEdit g(fork_model());
    g.add_tensor("blk.0.engram_embd_scale.weight", {1, 8}, GgmlType::I8, std::vector<uint8_t>(8, 127));
    EXPECT_NE(open_error(edited(g, "stray-scales")).find("unexpected tensor 'blk.0.engram_embd_scale.weight'"), std::string::npos);
}

// A table of any type the engine dequantises is taken, in the file's own bytes: here MXFP4,
// which the loader refused before, read back exactly as dequantize_row decodes it.
TEST(EngramFiles, AnyDequantisableTypeLoads) {
    for (const char* type : {"mxfp4", "bf16", "f16", "f32"}) {
        const std::string path = bgtest::cached_model(tiny_scale((std::string("tiny-engram-") + type).c_str(), type), kSeed);
        auto m = Model::open(path);
        const int64_t l = m->hp().engram_layers[1], dim = m->hp().engram_dim;
        EXPECT_EQ(m->engram_format(l), bg::parse_engram_format(type));
        bg::PreadEngramProvider plain(*m);
        bg::cpu::ThreadPool pool(1);
        auto ops = bg::cpu::make_cpu_ops(pool);
        const uint64_t row = 77;
        std::vector<float> got(dim), want(dim);
        plain.fetch_rows(l, &row, 1, got.data(), *ops);
        const bg::gguf::TensorInfo* t = m->layer(l).engram_embd;
        const uint64_t rb = bg::row_bytes(t->type, dim);
        std::vector<uint8_t> bytes(rb);
        bg::pread_exact(m->fd(t->shard), bytes.data(), rb, t->file_offset + row * rb, "test");
        bg::dequantize_row(t->type, bytes.data(), want.data(), dim);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), dim * 4)) << type;
    }
}

// ---- the command line -------------------------------------------------------------------------

// stdout of `betelgeuse ARGS`.
std::string cli_stdout(const std::string& args) {
    const std::string cmd = std::string(BG_BINARY_DIR) + "/betelgeuse " + args + " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return "";
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
}

TEST(EngramCli, MakeModelWritesTheFormatAskedForAndInfoShowsIt) {
    const std::string dir = bgtest::test_models_dir();
    const std::string scale = dir + "/engram-cli-scale.json", out = dir + "/engram-cli-fork.gguf";
    bg::write_file_atomic(scale, bgtest::kTinyScale);
    const bgtest::Exit e = bgtest::run_cli({"make-model", "--scale", scale, "--out", out, "--no-tokenizer",
                                            "--engram-format", "fork-fp8"});
    ASSERT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0) << e.err;
    auto m = Model::open(out);
    for (int64_t l : m->hp().engram_layers) EXPECT_EQ(m->engram_format(l), EngramFormat::fork_fp8());
    const std::string info = cli_stdout("info --no-tensors " + out);
    EXPECT_NE(info.find("engram table 1   fork-fp8: FP8-E4M3 values (i8) + E8M0 scales per 32 (i8)"), std::string::npos) << info;
    EXPECT_NE(info.find("33 bytes a row"), std::string::npos) << info;  // 32 values and their scale

    const bgtest::Exit bad = bgtest::run_cli({"make-model", "--scale", scale, "--out", dir + "/engram-cli-bad.gguf",
                                              "--no-tokenizer", "--engram-format", "i8"});
    EXPECT_TRUE(WIFEXITED(bad.status) && WEXITSTATUS(bad.status) == 1);
    EXPECT_NE(bad.err.find("Engram format 'i8' is neither fork-fp8 nor a tensor type"), std::string::npos) << bad.err;
    // A row width that is no whole number of scale groups.
    const std::string narrow = dir + "/engram-cli-narrow.json";
    std::string text = bgtest::kTinyScale;
    const std::string width = "\"engram_row_width\": 32";
    text.replace(text.find(width), width.size(), "\"engram_row_width\": 48");
    text.replace(text.find("\"dense_type\""), 0, "\"engram_type\": \"bf16\", ");
    bg::write_file_atomic(narrow, text);
    const bgtest::Exit odd = bgtest::run_cli({"make-model", "--scale", narrow, "--out", dir + "/engram-cli-odd.gguf",
                                              "--no-tokenizer", "--engram-format", "fork-fp8"});
    EXPECT_TRUE(WIFEXITED(odd.status) && WEXITSTATUS(odd.status) == 1);
    EXPECT_NE(odd.err.find("Engram rows of 48 values are not whole in format fork-fp8"), std::string::npos) << odd.err;
}

// ---- end to end -----------------------------------------------------------------------------

struct Engine {
    std::unique_ptr<Model> model;
    bg::cpu::ThreadPool pool{2};
    bg::PreadExpertProvider experts;
    bg::PreadEngramProvider engram;
    bg::dsv41::Forward fwd;
    bg::Runner runner;
    static bg::dsv41::ForwardConfig config() {
        bg::dsv41::ForwardConfig fc;
        fc.n_ctx = 64;  // prompt (40) and continuation (16)
        fc.max_ubatch = 16;
        return fc;
    }
    explicit Engine(const std::string& path)
        : model(Model::open(path)), experts(*model), engram(*model),
          fwd(*model, bg::cpu::make_cpu_ops(pool), experts, engram, config()), runner(*model, fwd) {}
};

// The tiny scale with no discrete choice downstream of the Engram rows: every expert used, and an
// indexer top-k that keeps every compressed row of a 40-token prompt.
bg::ModelScale smooth_scale(const char* name, const char* engram_format) {
    bg::ModelScale s = tiny_scale(name, engram_format);
    s.hp.n_expert = 8;
    s.hp.n_expert_used = 8;
    s.hp.idx_top_k = 64;
    return s;
}

// The plain reader with every row multiplied by f: a table read with a wrong scale.
class ScaledEngram final : public bg::EngramProvider {
public:
    ScaledEngram(const Model& m, float f) : inner_(m), f_(f), dim_(m.hp().engram_dim) {}
    void fetch_rows(int64_t layer, const uint64_t* rows, int64_t n, float* out, bg::Ops& ops) override {
        inner_.fetch_rows(layer, rows, n, out, ops);
        for (int64_t i = 0; i < n * dim_; ++i) out[i] *= f_;
    }
private:
    bg::PreadEngramProvider inner_;
    float f_;
    int64_t dim_;
};

// How many positions of two logit runs ([positions][512]) pick the same greedy token.
int same_greedy(const std::vector<float>& a, const std::vector<float>& b, size_t positions) {
    int same = 0;
    for (size_t p = 0; p < positions; ++p) {
        auto top = [&](const std::vector<float>& l) {
            return std::max_element(l.begin() + p * 512, l.begin() + (p + 1) * 512) - l.begin();
        };
        same += top(a) == top(b);
    }
    return same;
}

// End to end on the CPU: a model whose Engram tables are fork-fp8 against the same model with
// Q8_0 tables (every other tensor the same bytes), over a prompt and the Q8_0 model's greedy
// continuation. The scale uses every expert and an indexer top-k that keeps every compressed
// row, so no discrete choice (an expert or a row just in or out) turns a rounding difference
// into a jump: the logits then move with the rows.
//   Logits: within 5% of the largest logit, twice what FP8 rounding gives here (2.5%); the Q8_0
//   rows read 10% too large (a scale error) move them 8.6%, read twice too large 60%, so the
//   bound separates FP8's rounding from a mistake, which the test shows on every run.
//   Tokens: a random tiny model's logits are flat, so near-ties flip a few greedy picks under
//   any change of the rows (52 of 56 agree here, 53 with the rows 10% off): at least 3/4 must
//   agree, which rows twice too large do not (20 of 56).
TEST(EngramFiles, ForkModelRunsOnCpuCloseToTheQ8Model) {
    const std::string q8 = bgtest::cached_model(smooth_scale("tiny-smooth-engram-q8_0", "q8_0"), kSeed);
    const std::string fork = bgtest::cached_model(smooth_scale("tiny-smooth-engram-fork-fp8", "fork-fp8"), kSeed);
    const double kBound = 0.05;

    std::vector<int32_t> tokens = bg::random_prompt(40, 5, 512, 0);
    {
        Engine g(q8);
        std::vector<float> last;
        g.runner.prefill(tokens, bg::PrefillOrder::kLayerMajor, 16, &last);
        const std::vector<int32_t> cont = g.runner.decode(last, 16);
        tokens.insert(tokens.end(), cont.begin(), cont.end());
    }
    Engine a(q8), b(fork);
    std::vector<float> la, lb;
    a.runner.prefill(tokens, bg::PrefillOrder::kLayerMajor, 16, nullptr, &la);
    b.runner.prefill(tokens, bg::PrefillOrder::kLayerMajor, 16, nullptr, &lb);
    ASSERT_EQ(la.size(), tokens.size() * 512u);
    for (float v : lb) ASSERT_TRUE(std::isfinite(v));
    const double diff = bgtest::max_rel_diff(la, lb);
    const int same = same_greedy(la, lb, tokens.size());
    std::printf("fork-fp8 against q8_0: logits max rel diff %.4f, greedy token equal at %d of %zu positions\n", diff,
                same, tokens.size());
    EXPECT_LT(diff, kBound);
    EXPECT_GT(diff, 0.0) << "the tables differ, so the logits must";
    EXPECT_GE(4 * same, 3 * static_cast<int>(tokens.size()));

    for (float f : {1.1f, 2.0f}) {
        auto m = Model::open(q8);
        ScaledEngram wrong(*m, f);
        bg::cpu::ThreadPool pool(2);
        bg::PreadExpertProvider experts(*m);
        bg::dsv41::Forward fwd(*m, bg::cpu::make_cpu_ops(pool), experts, wrong, Engine::config());
        bg::Runner run(*m, fwd);
        std::vector<float> lw;
        run.prefill(tokens, bg::PrefillOrder::kLayerMajor, 16, nullptr, &lw);
        EXPECT_GT(bgtest::max_rel_diff(la, lw), kBound) << "rows x" << f;
        if (f == 2.0f) {
            EXPECT_LT(4 * same_greedy(la, lw, tokens.size()), 3 * static_cast<int>(tokens.size()));
        }
    }
}

}  // namespace
