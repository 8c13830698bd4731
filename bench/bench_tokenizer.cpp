// Tokenizer throughput (MB/s of text encoded) beside the JavaScript tokenizer of the npm
// package on the same text: Debian's licence texts plus the test suite's multilingual and
// edge-case texts, written to one file that both read.
//   build/bench_tokenizer   (needs scripts/setup-deps.sh: node and third_party/npm)
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "tokenizer/edge_cases.h"
#include "tokenizer/tokenizer_fixture.h"

namespace {

// The benchmark text, written once per process to a file the JavaScript side reads too.
const std::string& text_path() {
    static const std::string path = [] {
        std::string text;
        std::vector<std::string> files;
        if (DIR* d = ::opendir("/usr/share/common-licenses")) {
            while (dirent* e = ::readdir(d))
                if (e->d_name[0] != '.') files.push_back(std::string("/usr/share/common-licenses/") + e->d_name);
            ::closedir(d);
        }
        std::sort(files.begin(), files.end());
        for (const std::string& f : files) {
            struct stat st;
            if (::lstat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            std::ifstream in(f, std::ios::binary);
            std::stringstream ss;
            ss << in.rdbuf();
            text += ss.str();
        }
        for (const std::string& t : bgtest::multilingual_texts()) text += t + "\n";
        for (const std::string& t : bgtest::edge_case_texts()) text += t + "\n";
        const std::string p = std::string(BG_BINARY_DIR) + "/bench-tokenizer-text-" + std::to_string(::getpid()) + ".txt";
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }();
    return path;
}

std::string read_text() {
    std::ifstream in(text_path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void BM_Encode(benchmark::State& state) {
    const bg::tok::Tokenizer& t = bgtest::deepseek_tokenizer();
    const std::string text = read_text();
    size_t tokens = 0;
    for (auto _ : state) {
        const std::vector<int32_t> ids = t.encode(text, false);
        tokens = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
    state.counters["text_bytes"] = static_cast<double>(text.size());
    state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_Decode(benchmark::State& state) {
    const bg::tok::Tokenizer& t = bgtest::deepseek_tokenizer();
    const std::vector<int32_t> ids = t.encode(read_text(), false);
    size_t bytes = 0;
    for (auto _ : state) {
        const std::string s = t.decode(ids);
        bytes = s.size();
        benchmark::DoNotOptimize(s.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// node encodes the same file repeatedly for a few seconds and reports bytes and time; the
// benchmark takes its time as the iteration time, so bytes_per_second is the JavaScript MB/s.
void BM_EncodeJavaScript(benchmark::State& state) {
    const std::string out = text_path() + ".js.json";
    const std::string cmd = "node '" + bgtest::project_root() + "/tests/tokenizer/js_tokenizer.mjs' '" + bgtest::npm_dir() +
                            "' bench '" + text_path() + "' 4 > '" + out + "'";
    for (auto _ : state) {
        if (std::system(cmd.c_str()) != 0) {
            state.SkipWithError("node or the npm package is missing: run scripts/setup-deps.sh");
            return;
        }
        std::ifstream in(out);
        const nlohmann::json r = nlohmann::json::parse(in);
        state.SetIterationTime(r["seconds"].get<double>());
        state.SetBytesProcessed(r["bytes"].get<int64_t>() * r["iterations"].get<int64_t>());
        state.counters["js_iterations"] = r["iterations"].get<double>();
    }
    ::unlink(out.c_str());
}
BENCHMARK(BM_EncodeJavaScript)->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    ::unlink(text_path().c_str());
    return 0;
}
