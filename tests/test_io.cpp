// Disk-tier reader: byte-exact reads of arbitrary ranges through both engines, on a file whose
// size is not a multiple of 4096, with bounded queues, injected faults and the disk probe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/reader.h"
#include "util/check.h"
#include "util/rng.h"

namespace {

using bg::io::FaultPlan;
using bg::io::IoConfig;
using bg::io::ReadOp;
using bg::io::Reader;

constexpr uint64_t kFileBytes = 9ull * 1024 * 1024 + 1234;

uint64_t test_seed() {
    static const uint64_t seed = [] {
        const char* env = std::getenv("BG_TEST_SEED");
        const uint64_t s = env ? std::strtoull(env, nullptr, 0) : std::random_device{}();
        std::printf("test_io: seed %llu (set BG_TEST_SEED to repeat)\n", (unsigned long long)s);
        return s;
    }();
    return seed;
}

// One random test file per location, written once for the whole run.
struct TestFile {
    std::string dir;
    std::string path;
    std::vector<uint8_t> data;
};

TestFile* make_file(const std::string& parent) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    std::string tmpl = parent + "/bg_io_test_XXXXXX";
    if (!::mkdtemp(tmpl.data())) return nullptr;
    auto* f = new TestFile;
    f->dir = tmpl;
    f->path = tmpl + "/data.bin";
    f->data.resize(kFileBytes);
    bg::Rng rng(test_seed());
    for (size_t i = 0; i < f->data.size(); i += 8) {
        const uint64_t v = rng.next();
        std::memcpy(f->data.data() + i, &v, std::min<size_t>(8, f->data.size() - i));
    }
    FILE* out = std::fopen(f->path.c_str(), "wb");
    if (!out || std::fwrite(f->data.data(), 1, f->data.size(), out) != f->data.size() || std::fclose(out) != 0) {
        std::filesystem::remove_all(f->dir, ec);
        delete f;
        return nullptr;
    }
    return f;
}

// /tmp may be tmpfs (O_DIRECT refused on older kernels); the build tree sits on a real disk.
enum class Where { kTmp, kBuild, kShm };

TestFile* file_at(Where w) {
    static TestFile* files[3] = {};
    static bool made[3] = {};
    const int i = static_cast<int>(w);
    if (!made[i]) {
        made[i] = true;
        switch (w) {
            case Where::kTmp: files[i] = make_file(std::filesystem::temp_directory_path().string()); break;
            case Where::kBuild: files[i] = make_file(std::string(BG_BINARY_DIR) + "/test_io_tmp"); break;
            case Where::kShm: files[i] = make_file("/dev/shm"); break;
        }
        if (files[i]) {
            std::atexit([] {
                for (TestFile* f : files) {
                    if (!f) continue;
                    std::error_code ec;
                    std::filesystem::remove_all(f->dir, ec);
                }
            });
        }
    }
    return files[i];
}

struct Param {
    const char* engine;
    bool direct;
    Where where;
};

std::string param_name(const testing::TestParamInfo<Param>& info) {
    const Param& p = info.param;
    std::string s = std::string(p.engine) + (std::string(p.engine) == "uring" ? (p.direct ? "_direct" : "_buffered") : "");
    switch (p.where) {
        case Where::kTmp: return s + "_tmp";
        case Where::kBuild: return s + "_build";
        case Where::kShm: return s + "_shm";
    }
    return s;
}

struct Range {
    uint64_t offset, bytes;
};

// Edge cases first, then random ranges of every scale from one byte to several pieces.
std::vector<Range> make_ranges(uint64_t size, uint64_t read_bytes, uint64_t queue_depth, uint64_t seed, int n_random) {
    std::vector<Range> r = {
        {0, 1},
        {size - 1, 1},
        {size - 1234, 1234},
        {size - 5000, 5000},
        {size - (size % 4096), size % 4096},  // exactly the partial last block
        {4095, 2},
        {3 * 4096, 4096},
        {read_bytes - 7, 14},                 // straddles a piece boundary
        {123, 3 * read_bytes + 17},
        {0, size},                            // longer than read_bytes * queue_depth in most configs
    };
    if (read_bytes * queue_depth < size) r.push_back({777, read_bytes * queue_depth + 4096 * 3 + 5});
    bg::Rng rng(seed);
    for (int i = 0; i < n_random; ++i) {
        const uint64_t off = rng.below(size);
        uint64_t max_len;
        switch (rng.below(4)) {
            case 0: max_len = 64; break;
            case 1: max_len = 8192; break;
            case 2: max_len = read_bytes + 4096; break;
            default: max_len = 3 * read_bytes; break;
        }
        const uint64_t len = 1 + rng.below(std::min(max_len, size - off));
        r.push_back({off, len});
    }
    // Ranges ending exactly at EOF from random starts.
    for (int i = 0; i < 4; ++i) {
        const uint64_t off = rng.below(size);
        r.push_back({off, size - off});
    }
    return r;
}

struct Outcome {
    std::vector<int32_t> errors;        // per range
    std::vector<int> times_returned;    // per range
    std::vector<std::vector<uint8_t>> bytes;
};

// Submits every range at once (far more than the queue depth) and polls them all back, with
// small batch sizes and some non-waiting polls so both poll modes are exercised. batched: the
// ranges go in batches of 1 to 17 ops (Reader::submit of many), else one by one.
Outcome read_all(Reader& r, const std::vector<Range>& ranges, bool batched = false) {
    Outcome o;
    o.errors.assign(ranges.size(), -1);
    o.times_returned.assign(ranges.size(), 0);
    o.bytes.resize(ranges.size());
    std::vector<ReadOp> ops(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
        o.bytes[i].assign(ranges[i].bytes, 0xCD);
        ops[i].offset = ranges[i].offset;
        ops[i].bytes = ranges[i].bytes;
        ops[i].dst = o.bytes[i].data();
        ops[i].tag = i;
        if (!batched) r.submit(&ops[i]);
    }
    if (batched) {
        std::vector<ReadOp*> ptrs(ops.size());
        for (size_t i = 0; i < ops.size(); ++i) ptrs[i] = &ops[i];
        bg::Rng rng(test_seed() + 7);
        for (size_t i = 0; i < ptrs.size();) {
            const size_t n = std::min<size_t>(ptrs.size() - i, 1 + rng.below(17));
            r.submit(ptrs.data() + i, n);
            i += n;
        }
    }
    EXPECT_EQ(r.pending(), ranges.size());
    ReadOp* got[5];
    uint64_t polls = 0;
    while (r.pending() > 0) {
        const size_t n = r.poll(got, 5, polls++ % 3 != 0);
        EXPECT_LE(n, 5u);
        for (size_t k = 0; k < n; ++k) {
            const uint64_t i = got[k]->tag;
            EXPECT_LT(i, ranges.size());
            if (i >= ranges.size()) continue;
            EXPECT_EQ(got[k], &ops[i]);
            ++o.times_returned[i];
            o.errors[i] = got[k]->error;
        }
    }
    EXPECT_EQ(r.poll(got, 5, true), 0u);  // nothing pending: must not block
    return o;
}

void expect_exact(const TestFile& f, const std::vector<Range>& ranges, const Outcome& o, int64_t allowed_error = -1) {
    for (size_t i = 0; i < ranges.size(); ++i) {
        EXPECT_EQ(o.times_returned[i], 1) << "range " << i;
        if (static_cast<int64_t>(i) == allowed_error) continue;
        ASSERT_EQ(o.errors[i], 0) << "range " << i << " offset " << ranges[i].offset << " bytes " << ranges[i].bytes;
        ASSERT_EQ(0, std::memcmp(o.bytes[i].data(), f.data.data() + ranges[i].offset, ranges[i].bytes))
            << "range " << i << " offset " << ranges[i].offset << " bytes " << ranges[i].bytes;
    }
}

class IoTest : public testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        file_ = file_at(GetParam().where);
        if (!file_) GTEST_SKIP() << "cannot create a test file in this location";
    }
    IoConfig cfg(uint32_t queue_depth, uint32_t read_bytes) const {
        IoConfig c;
        c.engine = bg::parse_enum<bg::io::IoEngine>(GetParam().engine);
        c.direct = GetParam().direct;
        c.queue_depth = queue_depth;
        c.read_bytes = read_bytes;
        return c;
    }
    bool is_uring() const { return std::string(GetParam().engine) == "uring"; }
    TestFile* file_ = nullptr;
};

TEST_P(IoTest, RandomRangesAreByteExact) {
    auto r = Reader::open(file_->path, cfg(8, 64 * 1024));
    std::printf("engine: %s\n", r->engine_name());
    EXPECT_EQ(r->file_size(0), kFileBytes);
    const auto ranges = make_ranges(kFileBytes, 64 * 1024, 8, test_seed() + 1, 200);
    const Outcome o = read_all(*r, ranges);
    expect_exact(*file_, ranges, o);
    EXPECT_EQ(r->pending(), 0u);
    uint64_t sum = 0;
    for (const Range& x : ranges) sum += x.bytes;
    const auto st = r->stats();
    EXPECT_EQ(st.ops, ranges.size());
    EXPECT_EQ(st.errors, 0u);
    EXPECT_EQ(st.bytes_requested, sum);
    if (is_uring()) EXPECT_GE(st.bytes_read, st.bytes_requested);
    else EXPECT_EQ(st.bytes_read, st.bytes_requested);
    EXPECT_GE(st.pieces, ranges.size());
}

TEST_P(IoTest, BatchedSubmissionsAreByteExact) {
    // More ops in a batch than the queue depth holds, and batches of one.
    auto r = Reader::open(file_->path, cfg(8, 64 * 1024));
    const auto ranges = make_ranges(kFileBytes, 64 * 1024, 8, test_seed() + 3, 200);
    expect_exact(*file_, ranges, read_all(*r, ranges, true));
    EXPECT_EQ(r->pending(), 0u);
    EXPECT_EQ(r->stats().ops, ranges.size());
}

TEST_P(IoTest, ABatchWithABadRangeQueuesNoneOfIt) {
    auto r = Reader::open(file_->path, cfg(4, 64 * 1024));
    uint8_t buf[3][16];
    ReadOp ops[3];
    const Range ranges[3] = {{100, 16}, {kFileBytes - 10, 11}, {5000, 16}};  // the middle one runs past the end
    ReadOp* ptrs[3];
    for (int i = 0; i < 3; ++i) {
        ops[i].offset = ranges[i].offset;
        ops[i].bytes = ranges[i].bytes;
        ops[i].dst = buf[i];
        ptrs[i] = &ops[i];
    }
    EXPECT_THROW(r->submit(ptrs, 3), bg::Error);
    EXPECT_EQ(r->pending(), 0u);
    ReadOp* got[3];
    EXPECT_EQ(r->poll(got, 3, false), 0u);
    // The good ones go through on their own afterwards.
    ptrs[1] = &ops[2];
    r->submit(ptrs, 2);
    size_t n = 0;
    while (n < 2) n += r->poll(got + n, 3 - n, true);
    for (int i : {0, 2}) {
        EXPECT_EQ(ops[i].error, 0);
        EXPECT_EQ(0, std::memcmp(buf[i], file_->data.data() + ranges[i].offset, 16)) << i;
    }
}

TEST_P(IoTest, QueueDepthAndReadSizeDoNotChangeBytes) {
    for (uint32_t qd : {1u, 64u}) {
        for (uint32_t rb : {4096u, 1u << 20}) {
            SCOPED_TRACE(testing::Message() << "queue depth " << qd << ", read size " << rb);
            auto r = Reader::open(file_->path, cfg(qd, rb));
            EXPECT_EQ(r->config().queue_depth, qd);
            EXPECT_EQ(r->config().read_bytes, rb);
            // The same ranges for every setting: equality to the file means equality to each other.
            const auto ranges = make_ranges(kFileBytes, 64 * 1024, 8, test_seed() + 2, 60);
            expect_exact(*file_, ranges, read_all(*r, ranges));
            EXPECT_EQ(r->pending(), 0u);
        }
    }
}

TEST_P(IoTest, ShortReadsAndInterruptsAreRecovered) {
    FaultPlan faults;
    faults.short_read_every = 2;
    faults.eintr_every = 3;
    faults.eagain_every = 5;
    auto r = Reader::open(file_->path, cfg(8, 64 * 1024), faults);
    const auto ranges = make_ranges(kFileBytes, 64 * 1024, 8, test_seed() + 3, 100);
    expect_exact(*file_, ranges, read_all(*r, ranges));
    const auto st = r->stats();
    EXPECT_GT(st.short_reads, 0u);
    EXPECT_GT(st.retries, 0u);
    EXPECT_EQ(st.errors, 0u);
    EXPECT_EQ(r->pending(), 0u);
}

TEST_P(IoTest, EioFailsExactlyTheOpThatHitIt) {
    // One piece per op and one in flight: the 4th completion belongs to op 3 in both engines.
    FaultPlan faults;
    faults.eio_at = 3;
    auto r = Reader::open(file_->path, cfg(1, 64 * 1024), faults);
    std::vector<Range> ranges;
    bg::Rng rng(test_seed() + 4);
    for (int i = 0; i < 12; ++i) {
        const uint64_t off = rng.below(kFileBytes - 10000);
        ranges.push_back({off, 1 + rng.below(10000)});
    }
    const Outcome o = read_all(*r, ranges);
    EXPECT_EQ(o.errors[3], EIO);
    expect_exact(*file_, ranges, o, 3);
    EXPECT_EQ(r->stats().errors, 1u);
    EXPECT_EQ(r->pending(), 0u);
}

TEST_P(IoTest, EioInAManyPieceOpDrainsBeforeReturning) {
    FaultPlan faults;
    faults.eio_at = 5;
    auto r = Reader::open(file_->path, cfg(16, 16 * 1024), faults);
    // Ops are freed as soon as poll returns them: a piece still in flight for a returned op
    // would touch freed memory (caught by the sanitizer build) or return the op twice.
    const size_t n = 8;
    std::vector<std::unique_ptr<ReadOp>> ops(n);
    std::vector<std::unique_ptr<uint8_t[]>> dst(n);
    std::vector<int> returned(n, 0), errors(n, 0);
    std::vector<Range> ranges(n);
    for (size_t i = 0; i < n; ++i) {
        ranges[i] = {i * 1000 + 17, 200 * 1024 + i};
        dst[i] = std::make_unique<uint8_t[]>(ranges[i].bytes);
        ops[i] = std::make_unique<ReadOp>();
        ops[i]->offset = ranges[i].offset;
        ops[i]->bytes = ranges[i].bytes;
        ops[i]->dst = dst[i].get();
        ops[i]->tag = i;
        r->submit(ops[i].get());
    }
    while (r->pending() > 0) {
        ReadOp* got[4];
        const size_t k = r->poll(got, 4, true);
        for (size_t j = 0; j < k; ++j) {
            const uint64_t i = got[j]->tag;
            ASSERT_LT(i, n);
            ++returned[i];
            errors[i] = got[j]->error;
            if (errors[i] == 0) {
                EXPECT_EQ(0, std::memcmp(dst[i].get(), file_->data.data() + ranges[i].offset, ranges[i].bytes)) << i;
            }
            ops[i].reset();
            dst[i].reset();
        }
    }
    int failed = 0;
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(returned[i], 1) << i;
        if (errors[i] != 0) {
            EXPECT_EQ(errors[i], EIO);
            ++failed;
        }
    }
    EXPECT_EQ(failed, 1);
    EXPECT_EQ(r->stats().errors, 1u);
}

TEST_P(IoTest, BlockingReadNamesTheOffsetOnError) {
    auto r = Reader::open(file_->path, cfg(4, 64 * 1024));
    std::vector<uint8_t> buf(5000);
    bg::io::read_blocking(*r, 0, buf.data(), buf.size(), kFileBytes - buf.size());
    EXPECT_EQ(0, std::memcmp(buf.data(), file_->data.data() + kFileBytes - buf.size(), buf.size()));

    FaultPlan faults;
    faults.eio_at = 0;
    auto bad = Reader::open(file_->path, cfg(4, 64 * 1024), faults);
    try {
        bg::io::read_blocking(*bad, 0, buf.data(), buf.size(), 123457);
        ADD_FAILURE() << "no bg::Error";
    } catch (const bg::Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("123457"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::strerror(EIO)), std::string::npos) << msg;
    }
    EXPECT_EQ(bad->pending(), 0u);
}

TEST_P(IoTest, RangePastEndIsRejectedAtSubmit) {
    auto r = Reader::open(file_->path, cfg(4, 64 * 1024));
    uint8_t buf[16];
    for (Range x : {Range{kFileBytes - 10, 11}, Range{kFileBytes + 1, 0}, Range{kFileBytes, 1},
                    Range{~0ull - 4, 8}, Range{8, ~0ull - 4}}) {
        ReadOp op;
        op.offset = x.offset;
        op.bytes = x.bytes;
        op.dst = buf;
        EXPECT_THROW(r->submit(&op), bg::Error) << x.offset << " " << x.bytes;
    }
    EXPECT_EQ(r->pending(), 0u);
    // A range ending exactly at EOF, and an empty one there, are fine.
    bg::io::read_blocking(*r, 0, buf, 10, kFileBytes - 10);
    EXPECT_EQ(0, std::memcmp(buf, file_->data.data() + kFileBytes - 10, 10));
    bg::io::read_blocking(*r, 0, buf, 0, kFileBytes);
}

// A split model's shards: one reader over several files, each read naming its file. Ranges of
// every file are queued together, so pieces of different files are in flight at once.
TEST_P(IoTest, SeveralFilesReadByIndex) {
    struct Extra {
        std::string path;
        std::vector<uint8_t> data;
    };
    std::vector<Extra> extra(2);
    const uint64_t sizes[2] = {5000, 3 * 65536 + 123};
    bg::Rng rng(test_seed() + 11);
    for (int k = 0; k < 2; ++k) {
        extra[k].path = file_->dir + "/shard" + std::to_string(k + 2) + "-" + GetParam().engine + ".bin";
        extra[k].data.resize(sizes[k]);
        for (uint8_t& x : extra[k].data) x = static_cast<uint8_t>(rng.next());
        FILE* out = std::fopen(extra[k].path.c_str(), "wb");
        ASSERT_NE(out, nullptr);
        ASSERT_EQ(std::fwrite(extra[k].data.data(), 1, sizes[k], out), sizes[k]);
        ASSERT_EQ(std::fclose(out), 0);
    }
    struct Cleanup {
        std::vector<Extra>& e;
        ~Cleanup() {
            for (const Extra& x : e) std::remove(x.path.c_str());
        }
    } cleanup{extra};
    const std::vector<std::string> paths = {file_->path, extra[0].path, extra[1].path};
    auto r = Reader::open(paths, cfg(4, 64 * 1024));
    ASSERT_EQ(r->file_count(), 3u);
    for (uint32_t k = 0; k < 3; ++k) EXPECT_EQ(r->path(k), paths[k]);
    EXPECT_EQ(r->file_size(0), kFileBytes);
    EXPECT_EQ(r->file_size(1), sizes[0]);
    EXPECT_EQ(r->file_size(2), sizes[1]);
    auto data_of = [&](uint32_t file) -> const std::vector<uint8_t>& { return file == 0 ? file_->data : extra[file - 1].data; };

    struct FileRange {
        uint32_t file;
        Range range;
    };
    std::vector<FileRange> ranges;
    for (uint32_t k = 0; k < 3; ++k) {
        const uint64_t size = data_of(k).size();
        for (const Range& x : make_ranges(size, 64 * 1024, 4, test_seed() + k, 30))
            if (x.bytes <= size && x.offset <= size - x.bytes) ranges.push_back({k, x});
    }
    std::shuffle(ranges.begin(), ranges.end(), std::mt19937_64(test_seed()));
    std::vector<ReadOp> ops(ranges.size());
    std::vector<std::vector<uint8_t>> bytes(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
        bytes[i].assign(ranges[i].range.bytes, 0xCD);
        ops[i].file = ranges[i].file;
        ops[i].offset = ranges[i].range.offset;
        ops[i].bytes = ranges[i].range.bytes;
        ops[i].dst = bytes[i].data();
        ops[i].tag = i;
        r->submit(&ops[i]);
    }
    std::vector<int> returned(ranges.size(), 0);
    ReadOp* got[7];
    while (r->pending() > 0) {
        const size_t n = r->poll(got, 7, true);
        for (size_t j = 0; j < n; ++j) {
            const uint64_t i = got[j]->tag;
            ASSERT_LT(i, ranges.size());
            ++returned[i];
            ASSERT_EQ(got[j]->error, 0) << "file " << ranges[i].file << " offset " << ranges[i].range.offset;
            ASSERT_EQ(0, std::memcmp(bytes[i].data(), data_of(ranges[i].file).data() + ranges[i].range.offset,
                                     ranges[i].range.bytes))
                << "file " << ranges[i].file << " offset " << ranges[i].range.offset << " bytes " << ranges[i].range.bytes;
        }
    }
    for (size_t i = 0; i < ranges.size(); ++i) EXPECT_EQ(returned[i], 1) << i;

    // Ranges are checked against their own file: inside file 0 is past the end of file 1.
    uint8_t buf[64];
    ReadOp op;
    op.file = 1;
    op.offset = sizes[0] - 10;
    op.bytes = 11;
    op.dst = buf;
    try {
        r->submit(&op);
        ADD_FAILURE() << "a range past file 1's end was accepted";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("past the end of " + extra[0].path), std::string::npos) << e.what();
    }
    op.file = 3;
    op.offset = 0;
    op.bytes = 1;
    try {
        r->submit(&op);
        ADD_FAILURE() << "file 3 of 3 was accepted";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("names file 3, but the reader has 3"), std::string::npos) << e.what();
    }
    EXPECT_EQ(r->pending(), 0u);
    bg::io::read_blocking(*r, 2, buf, 64, sizes[1] - 64);
    EXPECT_EQ(0, std::memcmp(buf, extra[1].data.data() + sizes[1] - 64, 64));

    // A failed read names its file.
    FaultPlan faults;
    faults.eio_at = 0;
    auto bad = Reader::open(paths, cfg(4, 64 * 1024), faults);
    try {
        bg::io::read_blocking(*bad, 2, buf, 64, 100);
        ADD_FAILURE() << "no bg::Error";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("offset 100 of " + extra[1].path), std::string::npos) << e.what();
    }
    // A file that cannot be opened is named, whichever it is.
    try {
        Reader::open({file_->path, file_->dir + "/no-such-shard.bin"}, cfg(4, 64 * 1024));
        ADD_FAILURE() << "a missing second file was accepted";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find(file_->dir + "/no-such-shard.bin"), std::string::npos) << e.what();
    }
}

TEST_P(IoTest, ProbeDiskReportsPositiveNumbers) {
    bg::io::ProbeConfig pc;
    pc.io = cfg(16, 256 * 1024);
    pc.seq_bytes = 64ull << 20;  // more than the file: capped
    pc.rand_reads = 2000;
    pc.batches = 20;  // of 24 reads asked, at most the queue depth's 16 at once
    const auto res = bg::io::probe_disk(file_->path, pc);
    std::printf("probe: %.2f GB/s sequential, %.0f IOPS, %llu reads at once %.3f ms, %s\n", res.seq_gb_s, res.rand_iops,
                (unsigned long long)res.batch_reads, res.batch_ms_median, res.engine.c_str());
    EXPECT_EQ(res.seq_bytes, kFileBytes);
    EXPECT_GT(res.seq_gb_s, 0);
    EXPECT_GT(res.seq_seconds, 0);
    EXPECT_GT(res.rand_iops, 0);
    EXPECT_GT(res.rand_gb_s, 0);
    EXPECT_EQ(res.batch_reads, 16u);
    EXPECT_GT(res.batch_ms_median, 0);
    EXPECT_GE(res.batch_ms_p90, res.batch_ms_median);
    EXPECT_FALSE(res.engine.empty());
    pc.batches = 0;
    EXPECT_EQ(bg::io::probe_disk(file_->path, pc).batch_ms_median, 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoTest,
                         testing::Values(Param{"uring", true, Where::kTmp}, Param{"uring", true, Where::kBuild},
                                         Param{"uring", true, Where::kShm}, Param{"uring", false, Where::kBuild},
                                         Param{"pread", false, Where::kTmp}, Param{"pread", false, Where::kBuild}),
                         param_name);

TEST(IoConfigTest, BadSettingsAreRejected) {
    TestFile* f = file_at(Where::kBuild);
    ASSERT_NE(f, nullptr);
    auto message = [&](IoConfig c) -> std::string {
        try {
            Reader::open(f->path, c);
        } catch (const bg::Error& e) {
            return e.what();
        }
        return "";
    };
    // An engine name is parsed at the edge (--io), which names the choices.
    try {
        (void)bg::parse_enum<bg::io::IoEngine>("mmap");
        ADD_FAILURE() << "'mmap' parsed as an io engine";
    } catch (const bg::Error& e) {
        EXPECT_NE(std::string(e.what()).find("--io must be one of uring | pread, got 'mmap'"), std::string::npos) << e.what();
    }
    IoConfig c;
    c.queue_depth = 0;
    EXPECT_NE(message(c).find("queue depth"), std::string::npos);
    c.queue_depth = 4097;
    EXPECT_NE(message(c).find("queue depth"), std::string::npos);
    c = IoConfig{};
    c.read_bytes = 1000;
    EXPECT_NE(message(c).find("read size"), std::string::npos);
    c.read_bytes = 4096 + 512;
    EXPECT_NE(message(c).find("read size"), std::string::npos);
    c.read_bytes = 0;
    EXPECT_NE(message(c).find("read size"), std::string::npos);
    c = IoConfig{};
    EXPECT_EQ(message(c), "");  // the defaults are valid
}

TEST(IoConfigTest, MissingFileNamesThePath) {
    for (const char* engine : {"uring", "pread"}) {
        IoConfig c;
        c.engine = bg::parse_enum<bg::io::IoEngine>(engine);
        try {
            Reader::open("/nonexistent/bg_io_missing.bin", c);
            ADD_FAILURE() << engine;
        } catch (const bg::Error& e) {
            EXPECT_NE(std::string(e.what()).find("/nonexistent/bg_io_missing.bin"), std::string::npos) << e.what();
        }
    }
}

// Without CAP_IPC_LOCK and with only enough lockable memory for the ring itself, registering the bounce buffers fails and
// the reader must fall back to plain READ with the same results. Runs in a child process
// because both changes are irreversible.
void read_with_unregistered_buffers(const TestFile& f) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &hdr, data) == 0) {
        data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
        data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
        syscall(SYS_capset, &hdr, data);
    }
    rlimit lim{128 * 1024, 128 * 1024};  // the buffers below need 512 KiB
    setrlimit(RLIMIT_MEMLOCK, &lim);
    IoConfig c;
    c.queue_depth = 8;
    c.read_bytes = 64 * 1024;
    auto r = Reader::open(f.path, c);
    if (std::string(r->engine_name()).find("not registered") == std::string::npos) {
        std::fprintf(stderr, "buffers were registered: %s\n", r->engine_name());
        std::_Exit(2);
    }
    const auto ranges = make_ranges(kFileBytes, c.read_bytes, c.queue_depth, test_seed() + 5, 100);
    const Outcome o = read_all(*r, ranges);
    for (size_t i = 0; i < ranges.size(); ++i) {
        if (o.times_returned[i] != 1 || o.errors[i] != 0 ||
            std::memcmp(o.bytes[i].data(), f.data.data() + ranges[i].offset, ranges[i].bytes) != 0) {
            std::fprintf(stderr, "range %zu wrong\n", i);
            std::_Exit(1);
        }
    }
    std::fprintf(stderr, "ok: %s\n", r->engine_name());
    std::_Exit(0);
}

TEST(IoUringFallback, UnregisteredBuffersStillReadExactly) {
    TestFile* f = file_at(Where::kBuild);
    ASSERT_NE(f, nullptr);
    testing::FLAGS_gtest_death_test_style = "fast";
    EXPECT_EXIT(read_with_unregistered_buffers(*f), testing::ExitedWithCode(0), "ok: io_uring");
}

}  // namespace
