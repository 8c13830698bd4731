// Fault drills through the whole engine (SPEC §6) on the tiny model: a slow or flaky disk gives
// the same tokens and slots that match the file; an EIO, or a model file that shrinks under a
// run, is a clear error naming the offset and never a result; budgets too small say what would
// fit (and that really fits); and `betelgeuse run` on a corrupt file prints one error line and
// exits 1, not on a signal.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "model_fixture.h"
#include "gguf/gguf.h"
#include "model/dsv41.h"
#include "runtime/session.h"
#include "util/check.h"

namespace {

bg::RunConfig base_cfg(const std::string& model) {
    bg::RunConfig c;
    c.model_path = model;
    c.prompt_tokens = 24;
    c.prompt_seed = 11;
    c.gen = 3;
    c.slots = 8;
    c.hot = 2;
    c.transient_slots = 6;
    c.threads = 2;
    c.ubatch = 8;
    c.routing = bg::RoutingPolicy::kExact;  // leaves the resident set, so cold and warm passes both read the disk
    c.passes = 2;
    c.read_size = 8192;   // several pieces per expert: more completions for the faults to hit
    return c;
}

struct Outcome {
    std::vector<int32_t> tokens;
    nlohmann::json metrics;
};

Outcome run_session(const bg::RunConfig& c) {
    bg::Session s(c);
    nlohmann::json m = s.run(false);
    return {s.generated(), std::move(m)};
}

// Tokens and per-pass disk traffic of a fault-free run, per io engine.
const Outcome& reference(const std::string& io) {
    static std::map<std::string, Outcome> cache;
    auto it = cache.find(io);
    if (it == cache.end()) {
        bg::RunConfig c = base_cfg(bgtest::tiny_model());
        c.io = bg::parse_enum<bg::io::IoEngine>(io);
        it = cache.emplace(io, run_session(c)).first;
    }
    return it->second;
}

const char* const kEngines[] = {"uring", "pread"};

// The number right after `key` in `msg`, or -1 (std::regex draws gcc 12 false warnings).
int64_t number_after(const std::string& msg, const std::string& key) {
    const size_t at = msg.find(key);
    if (at == std::string::npos) return -1;
    const char* p = msg.c_str() + at + key.size();
    if (*p < '0' || *p > '9') return -1;
    return std::strtoll(p, nullptr, 10);
}

// What run() must throw: one line naming the failed read and its file offset.
void expect_read_error(const std::string& msg, const char* what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("read"), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed"), std::string::npos) << msg;
    EXPECT_GE(number_after(msg, "at offset "), 0) << msg;
}

TEST(Faults, SlowRequestsGiveIdenticalTokens) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        bg::RunConfig c = base_cfg(bgtest::tiny_model());
        c.io = bg::parse_enum<bg::io::IoEngine>(io);
        c.queue_depth = 2;         // the delays add up instead of overlapping
        c.faults.delay_us = 400;
        const Outcome got = run_session(c);
        const Outcome& want = reference(io);
        EXPECT_EQ(got.tokens, want.tokens);
        ASSERT_EQ(got.tokens.size(), 3u);
        for (int p = 0; p < 2; ++p)
            EXPECT_EQ(got.metrics["passes"][p]["experts"]["disk_fetches"], want.metrics["passes"][p]["experts"]["disk_fetches"])
                << "pass " << p + 1 << ": a slow disk must not change what is fetched";
    }
}

TEST(Faults, ShortReadsEintrAndEagainGiveIdenticalTokensAndVerifiedSlots) {
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        bg::RunConfig c = base_cfg(bgtest::tiny_model());
        c.io = bg::parse_enum<bg::io::IoEngine>(io);
        c.faults.short_read_every = 2;
        c.faults.eintr_every = 3;
        c.faults.eagain_every = 5;
        c.verify_slots = true;  // every loaded slot compared with the file after each pass
        c.promote = true;
        const Outcome got = run_session(c);
        EXPECT_EQ(got.tokens, reference(io).tokens);
        for (const auto& p : got.metrics["passes"]) EXPECT_GT(p["verified_slots"].get<uint64_t>(), 0u);
    }
}

TEST(Faults, EioOnOneRequestIsAClearErrorNeverAResult) {
    for (const char* io : kEngines) {
        for (int64_t at : {0, 7, 40}) {
            SCOPED_TRACE(std::string(io) + " eio_at " + std::to_string(at));
            bg::RunConfig c = base_cfg(bgtest::tiny_model());
            c.io = bg::parse_enum<bg::io::IoEngine>(io);
            c.faults.eio_at = at;
            bg::Session s(c);
            try {
                s.run(false);
                ADD_FAILURE() << "an EIO must stop the run";
            } catch (const bg::Error& e) {
                expect_read_error(e.what(), "EIO");
                EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
            }
            EXPECT_TRUE(s.generated().empty()) << "no tokens from a run that failed";
        }
    }
}

// A fresh folder in the build tree (not /tmp: tmpfs refuses O_DIRECT and would test another
// path), removed with what was written into it.
class TempDir {
public:
    TempDir() {
        std::string tmpl = std::string(BG_BINARY_DIR) + "/test_faults_XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
        dir_ = tmpl;
    }
    ~TempDir() {
        for (const std::string& f : files_) ::unlink(f.c_str());
        ::rmdir(dir_.c_str());
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string file(const std::string& name, const std::vector<char>& bytes) {
        const std::string p = dir_ + "/" + name;
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        out.close();
        EXPECT_TRUE(out.good()) << p;
        files_.push_back(p);
        return p;
    }

private:
    std::string dir_;
    std::vector<std::string> files_;
};

std::vector<char> slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}


// Opens a session on a copy of the tiny model, cuts the file to `new_size` bytes, then runs:
// run() must throw a read error (the experts past the new end cannot be read), not crash,
// hang or give tokens from wrong weights.
void expect_truncation_is_a_read_error(TempDir& tmp, const char* io, uint64_t new_size) {
    const std::vector<char> model = slurp(bgtest::tiny_model());
    ASSERT_GT(model.size(), 1u << 20);
    const std::string path = tmp.file(std::string("shrinks-") + io + "-" + std::to_string(new_size) + ".gguf", model);
    bg::RunConfig c = base_cfg(path);
    c.io = bg::parse_enum<bg::io::IoEngine>(io);
    bg::Session s(c);  // header and dense weights read while the file was whole
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(new_size)), 0) << std::strerror(errno);
    ::close(fd);
    try {
        s.run(false);
        ADD_FAILURE() << "experts past the new end of file cannot be read";
    } catch (const bg::Error& e) {
        expect_read_error(e.what(), "truncated");
    }
    EXPECT_TRUE(s.generated().empty());
}

uint64_t half_of_model() { return slurp(bgtest::tiny_model()).size() / 2; }

TEST(FaultsOnFile, ModelTruncatedUnderARunIsAReadErrorNotWrongWeights) {
    TempDir tmp;
    const uint64_t half = half_of_model();
    for (const char* io : kEngines) {
        SCOPED_TRACE(io);
        expect_truncation_is_a_read_error(tmp, io, half / 4096 * 4096);
    }
    SCOPED_TRACE("pread, unaligned end");
    expect_truncation_is_a_read_error(tmp, "pread", half / 4096 * 4096 + 1234);
}

// With io_uring, a file cut to a size that is not a multiple of 4 KiB under a run: the short
// read that ends off a page boundary is the end of the file, an error, not a retry.
TEST(FaultsOnFile, UringModelTruncatedToAnUnalignedSizeIsAReadError) {
    TempDir tmp;
    expect_truncation_is_a_read_error(tmp, "uring", half_of_model() / 4096 * 4096 + 1234);
}

// The one-line error a session with this configuration must refuse to start with.
std::string refusal(const bg::RunConfig& c, const std::string& why) {
    try {
        bg::Session s(c);
        ADD_FAILURE() << why;
    } catch (const bg::Error& e) {
        return e.what();
    }
    return "";
}

// Budgets too small: the message says what would fit, and that setting does fit while one
// more does not.
TEST(Faults, VramBudgetTooSmallSaysWhatWouldFit) {
    bg::RunConfig c = base_cfg(bgtest::tiny_model());
    c.slots = 64;
    c.hot = 64;
    c.vram_budget_mib = 3;  // the 2 MiB Engram buffer, the transient slots and some hot slots
    const std::string msg = refusal(c, "64 hot experts per layer do not fit in 3 MiB");
    const int64_t fit = number_after(msg, "it would fit --hot ");
    EXPECT_NE(msg.find("VRAM budget"), std::string::npos) << msg;
    ASSERT_GT(fit, 0) << msg;
    ASSERT_LT(fit, 64) << msg;
    c.hot = fit;
    EXPECT_NO_THROW(bg::Session s(c)) << "--hot " << fit << " was said to fit";
    c.hot = fit + 1;
    EXPECT_THROW(bg::Session s(c), bg::Error) << "--hot " << fit + 1 << " was said not to fit";
}

// Below the budget's fixed part (the Engram buffer, dense weights and work buffers) no --hot helps:
// the message names the budget that would do, and that budget with --hot 0 --transient-slots 1 runs.
TEST(Faults, VramBudgetBelowTheFixedPartNamesTheBudgetNeeded) {
    bg::RunConfig c = base_cfg(bgtest::tiny_model());
    c.hot = 2;
    c.vram_budget_mib = 1;  // less than the 2 MiB Engram buffer alone
    const std::string msg = refusal(c, "the Engram buffer alone exceeds 1 MiB");
    EXPECT_EQ(msg.find("it would fit --hot"), std::string::npos) << msg;
    const int64_t need = number_after(msg, "it would need --vram-budget ");
    ASSERT_GT(need, 1) << msg;
    c.vram_budget_mib = need;
    c.hot = 0;
    c.transient_slots = 1;
    EXPECT_NO_THROW(bg::Session s(c)) << msg;
}

// Between the fixed part and the fixed part plus the transient area, the way out is fewer
// transient slots; the number named fits, one more does not.
TEST(Faults, VramBudgetBelowTheTransientAreaSuggestsTransientSlots) {
    bg::RunConfig c = base_cfg(bgtest::tiny_model());
    c.hot = 0;
    c.transient_slots = 4096;  // far more than a few MiB hold
    c.vram_budget_mib = 4;
    const std::string msg = refusal(c, "4096 transient slots do not fit in 4 MiB");
    const int64_t fit = number_after(msg, "it would fit --hot 0 --transient-slots ");
    ASSERT_GT(fit, 0) << msg;
    ASSERT_LT(fit, 4096) << msg;
    c.transient_slots = fit;
    EXPECT_NO_THROW(bg::Session s(c)) << msg;
    c.transient_slots = fit + 1;
    EXPECT_THROW(bg::Session s(c), bg::Error) << "--transient-slots " << fit + 1 << " was said not to fit";
}

// The --slots the store suggests for a host budget too small for 64 slots per layer.
int64_t suggested_slots(bg::RunConfig c, std::string* msg) {
    c.slots = 64;
    *msg = refusal(c, "62 host slots per layer plus the dense weights do not fit in " + std::to_string(c.host_budget_mib) + " MiB");
    return number_after(*msg, "it would fit --slots ");
}

TEST(Faults, HostBudgetTooSmallSaysWhatWouldFit) {
    bg::RunConfig c = base_cfg(bgtest::tiny_model());
    c.hot = 2;
    c.host_budget_mib = 5;  // above the ~4.1 MiB of dense weights, caches and buffers (64-token launches), below all 64 slots
    std::string msg;
    const int64_t fit = suggested_slots(c, &msg);
    EXPECT_NE(msg.find("host budget"), std::string::npos) << msg;
    EXPECT_GT(fit, c.hot) << msg;
    EXPECT_LT(fit, 64) << msg;
    c.slots = fit + 1;
    EXPECT_THROW(bg::Session s(c), bg::Error) << "--slots " << fit + 1 << " was said not to fit";
}

// The store's suggestion counts everything the session holds in host memory (dense weights,
// the forward pass's caches and work buffers, the Engram staging), so the setting it names fits.
TEST(Faults, HostBudgetSuggestionReallyFits) {
    bg::RunConfig c = base_cfg(bgtest::tiny_model());
    c.hot = 2;
    c.host_budget_mib = 5;  // above the ~4.1 MiB of dense weights, caches and buffers (64-token launches), below all 64 slots
    std::string msg;
    c.slots = suggested_slots(c, &msg);
    ASSERT_GT(c.slots, c.hot) << msg;
    EXPECT_NO_THROW(bg::Session s(c)) << msg;
}

// ---- the command line on corrupt files ----

using bgtest::Exit;
using bgtest::run_cli;

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start < s.size()) {
        size_t end = s.find('\n', start);
        if (end == std::string::npos) end = s.size();
        out.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

TEST(CliOnCorruptModel, ExitsOneWithOneGgufErrorLine) {
    TempDir tmp;
    const std::vector<char> model = slurp(bgtest::tiny_model());
    ASSERT_GT(model.size(), 4096u);
    std::vector<char> bad_magic = model;
    bad_magic[0] = 'X';
    std::vector<char> bad_version = model;
    bad_version[4] = 2;
    const std::vector<char> short_header(model.begin(), model.begin() + 100);
    const std::vector<char> short_data(model.begin(), model.begin() + static_cast<std::ptrdiff_t>(model.size() / 2));
    struct Case {
        const char* name;
        const std::vector<char>* bytes;
        const char* expect;  // in the error line
    } cases[] = {
        {"bad-magic", &bad_magic, "bad magic"},
        {"bad-version", &bad_version, "unsupported version 2"},
        {"truncated-header", &short_header, "truncated file"},
        {"truncated-data", &short_data, "past end of file"},
        {"empty", nullptr, "truncated file"},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.name);
        const std::string path = tmp.file(std::string(k.name) + ".gguf", k.bytes ? *k.bytes : std::vector<char>{});
        for (const char* sub : {"run", "info"}) {
            SCOPED_TRACE(sub);
            std::vector<std::string> args{sub};
            if (std::string(sub) == "run") {
                args.insert(args.end(), {"--model", path, "--prompt-tokens", "4", "--gen", "1", "--threads", "1"});
            } else {
                args.push_back(path);
            }
            const Exit r = run_cli(args);
            ASSERT_TRUE(WIFEXITED(r.status)) << "killed by signal " << WTERMSIG(r.status) << "\n" << r.err;
            EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.err;
            const std::vector<std::string> lines = lines_of(r.err);
            ASSERT_FALSE(lines.empty());
            // `run` prints its configuration first; the error is the last line, and the only one.
            int error_lines = 0;
            for (const std::string& l : lines) error_lines += l.find("error") != std::string::npos;
            EXPECT_EQ(error_lines, 1) << r.err;
            const std::string& last = lines.back();
            EXPECT_EQ(last.rfind("betelgeuse: error: gguf: ", 0), 0u) << r.err;
            EXPECT_NE(last.find(path), std::string::npos) << "the message names the file: " << last;
            EXPECT_NE(last.find(k.expect), std::string::npos) << last;
            EXPECT_EQ(r.err.find("Sanitizer"), std::string::npos) << r.err;
            EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << r.err;
        }
    }
}

// Regression (fuzz/crashers/model/): strings from the file inside an error message are escaped,
// so a name holding a newline cannot split the message or forge a second "error:" line.
TEST(HostileModel, FileStringsInErrorsAreEscapedToOneLine) {
    const struct {
        const char* file;
        const char* expect;
    } cases[] = {
        {"arch-with-newline", "model: architecture is 'deep\\x0aseek4'"},
        {"unexpected-tensor-name-with-newline", "model: unexpected tensor 'blk.0.x\\x0abetelgeuse: error: forged'"},
    };
    for (const auto& k : cases) {
        SCOPED_TRACE(k.file);
        const auto r = bg::gguf::Reader::open(bgtest::source_path(std::string("fuzz/crashers/model/") + k.file));
        try {
            const bg::dsv41::HParams hp = bg::dsv41::read_hparams(r);
            bg::dsv41::validate_tensors(hp, r);
            ADD_FAILURE() << "the file must be rejected";
        } catch (const bg::Error& e) {
            const std::string msg = e.what();
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
            EXPECT_NE(msg.find(k.expect), std::string::npos) << msg;
        }
    }
}

}  // namespace
