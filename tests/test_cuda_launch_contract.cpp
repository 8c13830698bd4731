// The contract of chained launches (engine/cuda/launch.cuh), checked on the sources: a kernel
// launch_kernel launches may start while the kernel before it on the stream still runs, which is
// safe only because its first statement waits for that kernel. A kernel that read or wrote memory
// before grid_dependency_begin() would race on Hopper alone, and rarely, so no GPU test could be
// trusted to catch it: every kernel of engine/cuda is held to the rule here, on every build.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Probes launched plainly (<<< >>>), outside the forward's streams: they need no chaining.
const std::set<std::string> kPlainKernels = {"mma_peak_kernel", "fp16_subnormal_probe", "record_smid_kernel"};

// The text with comments blanked (string literals kept: none of engine/cuda's holds a comment).
std::string without_comments(const std::string& s) {
    std::string out = s;
    for (size_t i = 0; i + 1 < out.size(); ++i) {
        if (out[i] == '"') {  // skip a string literal
            for (++i; i < out.size() && out[i] != '"'; ++i)
                if (out[i] == '\\') ++i;
            continue;
        }
        if (out[i] == '/' && out[i + 1] == '/') {
            for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
        } else if (out[i] == '/' && out[i + 1] == '*') {
            size_t j = i;
            for (; j + 1 < out.size() && !(out[j] == '*' && out[j + 1] == '/'); ++j)
                if (out[j] != '\n') out[j] = ' ';
            if (j + 1 < out.size()) out[j] = out[j + 1] = ' ';
            i = j + 1;
        }
    }
    return out;
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Findings {
    int kernels = 0;          // __global__ definitions
    int chained_launches = 0;  // launch_kernel( calls
    std::vector<std::string> violations;
};

// What `source` (one file, named `file`) breaks of the contract.
Findings check_source(const std::string& file, const std::string& source) {
    Findings f;
    const std::string s = without_comments(source);
    for (size_t at = s.find("__global__"); at != std::string::npos; at = s.find("__global__", at + 1)) {
        const size_t body = s.find_first_of("{;", at);
        if (body == std::string::npos || s[body] == ';') continue;  // a declaration
        // The kernel's name: the first identifier followed by '(' that is not __launch_bounds__.
        std::string name;
        for (size_t i = at; i < body && name.empty(); ++i) {
            if (s[i] != '(') continue;
            size_t e = i;
            while (e > at && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
            size_t b = e;
            while (b > at && is_ident(s[b - 1])) --b;
            const std::string id = s.substr(b, e - b);
            if (!id.empty() && id != "__launch_bounds__") name = id;
        }
        if (name.empty()) {
            f.violations.push_back(file + ": a __global__ function whose name this check cannot read");
            continue;
        }
        ++f.kernels;
        if (kPlainKernels.count(name)) continue;
        size_t first = body + 1;
        while (first < s.size() && std::isspace(static_cast<unsigned char>(s[first]))) ++first;
        if (s.compare(first, 24, "grid_dependency_begin();") != 0)
            f.violations.push_back(file + ": kernel " + name +
                                   " does not begin with grid_dependency_begin(); (launch.cuh's contract)");
    }
    for (size_t at = s.find("<<<"); at != std::string::npos; at = s.find("<<<", at + 3)) {
        size_t e = at;
        if (e > 0 && s[e - 1] == '>') {  // a template kernel: skip its arguments back to the name
            int depth = 0;
            while (e > 0) {
                const char c = s[--e];
                if (c == '>') ++depth;
                if (c == '<' && --depth == 0) break;
            }
        }
        size_t b = e;
        while (b > 0 && is_ident(s[b - 1])) --b;
        const std::string name = s.substr(b, e - b);
        if (!kPlainKernels.count(name))
            f.violations.push_back(file + ": kernel " + (name.empty() ? std::string("?") : name) +
                                   " launched with <<< >>>, not launch_kernel (launch.cuh)");
    }
    for (size_t at = s.find("launch_kernel("); at != std::string::npos; at = s.find("launch_kernel(", at + 1))
        if (at == 0 || !is_ident(s[at - 1])) ++f.chained_launches;
    return f;
}

std::string read_all(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(CudaLaunchContract, EveryKernelOfTheEngineWaitsFirstAndIsLaunchedChained) {
    const std::filesystem::path dir = std::filesystem::path(BG_SOURCE_DIR) / "engine" / "cuda";
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    int kernels = 0, launches = 0, files = 0;
    std::vector<std::string> violations;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string ext = e.path().extension().string();
        if (ext != ".cu" && ext != ".cuh") continue;
        ++files;
        const Findings f = check_source(e.path().filename().string(), read_all(e.path()));
        kernels += f.kernels;
        launches += f.chained_launches;
        violations.insert(violations.end(), f.violations.begin(), f.violations.end());
    }
    for (const std::string& v : violations) ADD_FAILURE() << v;
    // A parse that finds nothing would pass vacuously: the op families hold about 40 kernels.
    EXPECT_GE(files, 30);
    EXPECT_GE(kernels, 35);
    EXPECT_GE(launches, 35);
}

TEST(CudaLaunchContract, TheCheckFindsAKernelThatTouchesMemoryBeforeItWaits) {
    const std::string ok =
        "template <int N>\n__global__ void __launch_bounds__(256) good_kernel(const float* x, float* y) {\n"
        "    // a comment first is fine\n    grid_dependency_begin();\n    y[0] = x[0];\n}\n"
        "void go(cudaStream_t s) { BG_CUDA_CHECK(launch_kernel(good_kernel<1>, 1, 1, 0, s, x, y)); }\n";
    const Findings good = check_source("ok.cu", ok);
    EXPECT_TRUE(good.violations.empty()) << good.violations.front();
    EXPECT_EQ(good.kernels, 1);
    EXPECT_EQ(good.chained_launches, 1);

    const Findings early = check_source(
        "early.cu", "__global__ void early_kernel(float* y) {\n    y[0] = 1;\n    grid_dependency_begin();\n}\n");
    ASSERT_EQ(early.violations.size(), 1u);
    EXPECT_NE(early.violations[0].find("early_kernel"), std::string::npos);

    const Findings plain = check_source(
        "plain.cu", "__global__ void k(float* y) {\n    grid_dependency_begin();\n}\n"
                    "void go() { k<<<1, 1, 0, s>>>(y); t_kernel<float><<<1, 1>>>(y); }\n");
    ASSERT_EQ(plain.violations.size(), 2u);
    EXPECT_NE(plain.violations[0].find("kernel k "), std::string::npos);
    EXPECT_NE(plain.violations[1].find("t_kernel"), std::string::npos);

    const Findings probe = check_source(
        "probe.cu", "__global__ void record_smid_kernel(int* d) { d[0] = 1; }\nvoid go() { record_smid_kernel<<<1, 1>>>(d); }\n");
    EXPECT_TRUE(probe.violations.empty());
}

}  // namespace
