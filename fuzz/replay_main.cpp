// Replays fuzz inputs through a target without libFuzzer: each argument is a file or a
// directory whose regular files are replayed in name order. Used by CTest to check the corpus
// and the fixed crashers under ASan/UBSan where clang's fuzzer runtime is not available.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool is_dir(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void collect(const std::string& path, std::vector<std::string>& out) {
    if (!is_dir(path)) {
        out.push_back(path);
        return;
    }
    DIR* d = ::opendir(path.c_str());
    if (!d) return;
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n == "." || n == ".." || n[0] == '.') continue;  // skips .gitkeep and the like
        names.push_back(path + "/" + n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) collect(n, out);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (!a.empty() && a[0] == '-') continue;  // libFuzzer flags (e.g. -runs=0) are accepted and ignored
        if (!is_dir(a)) {
            std::ifstream probe(a, std::ios::binary);
            if (!probe) {
                std::fprintf(stderr, "replay: cannot open '%s'\n", a.c_str());
                return 2;
            }
        }
        collect(a, files);
    }
    for (const std::string& f : files) {
        std::ifstream in(f, std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "replay: cannot open '%s'\n", f.c_str());
            return 2;
        }
        const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
        // A copy in a buffer of exactly the input's size, so ASan sees any read past its end.
        std::vector<uint8_t> buf(bytes.begin(), bytes.end());
        LLVMFuzzerTestOneInput(buf.empty() ? nullptr : buf.data(), buf.size());
    }
    std::printf("replay: %zu inputs, no finding\n", files.size());
    return files.empty() ? 3 : 0;
}
