// Runs the betelgeuse binary of this build tree, as a user would, for tests of the command line.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bgtest {

struct Exit {
    int status = 0;  // as waitpid gives it
    std::string err;
};

// Runs the betelgeuse binary with `args`, stdout discarded, stderr captured. A sanitizer report
// exits with its own code, so exit code 1 can only be the program's own error path.
inline Exit run_cli(const std::vector<std::string>& args) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) return {-1, "pipe failed"};
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(pipefd[1], 2);
        const int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, 1);
        ::close(pipefd[0]);
        ::close(pipefd[1]);
        for (const char* var : {"ASAN_OPTIONS", "UBSAN_OPTIONS"}) {
            const char* old = std::getenv(var);
            const std::string v = std::string(old ? old : "") + (old && *old ? ":" : "") + "exitcode=86";
            ::setenv(var, v.c_str(), 1);
        }
        const std::string bin = std::string(BG_BINARY_DIR) + "/betelgeuse";
        std::vector<char*> argv{const_cast<char*>(bin.c_str())};
        for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(bin.c_str(), argv.data());
        std::fprintf(stderr, "exec %s failed: %s\n", bin.c_str(), std::strerror(errno));
        ::_exit(127);
    }
    ::close(pipefd[1]);
    Exit r;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) r.err.append(buf, static_cast<size_t>(n));
    ::close(pipefd[0]);
    ::waitpid(pid, &r.status, 0);
    return r;
}

}  // namespace bgtest
