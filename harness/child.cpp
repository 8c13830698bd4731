#include "child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "cgroup.h"

namespace bgh {

namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_child = 0;

void on_signal(int sig) {
    if (!g_signal) g_signal = sig;
    const pid_t c = g_child;
    if (c > 0) ::kill(c, sig);
}

constexpr size_t kTailBytes = 8192;
// After a forwarded Ctrl-C the engine gets this long to stop on its own before SIGKILL.
constexpr double kGraceMs = 10000;

}  // namespace

std::string ChildResult::describe() const {
    if (exited) return "exit code " + std::to_string(exit_code);
    if (signal) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    return "did not run";
}

void install_interrupt_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() should wake up and notice
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }
void clear_interrupt() { g_signal = 0; }

ChildResult run_child(const std::vector<std::string>& argv, MemoryCgroup* cg,
                      const std::function<void(const std::string&)>& on_line, const std::function<void()>& on_tick,
                      int tick_ms) {
    if (argv.empty()) throw std::runtime_error("run_child: empty command");
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);

    int out[2], go[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(go, O_CLOEXEC) != 0) {
        ::close(out[0]);
        ::close(out[1]);
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    const pid_t parent = ::getpid();
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        // Own process group: a terminal's Ctrl-C reaches the harness only, which forwards it,
        // so the order of events at the end of a run is always the same.
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGTERM, SIG_DFL);
        // Wait until the parent has put this process into its cgroup: nothing the child
        // allocates may escape the limit.
        char b = 0;
        ssize_t n;
        do n = ::read(go[0], &b, 1);
        while (n < 0 && errno == EINTR);
        if (n != 1) ::_exit(126);
        ::dup2(out[1], 1);
        ::dup2(out[1], 2);
        const int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0) ::dup2(null, 0);
        ::execv(cargv[0], cargv.data());
        const char* msg = "harness: cannot execute ";
        ssize_t w = ::write(2, msg, std::strlen(msg));
        w = ::write(2, cargv[0], std::strlen(cargv[0]));
        w = ::write(2, "\n", 1);
        (void)w;
        ::_exit(127);
    }
    ::close(out[1]);
    ::close(go[0]);
    g_child = pid;
    auto reap = [&] {
        int st = 0;
        while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        g_child = 0;
        return st;
    };
    if (cg) {
        try {
            cg->attach(pid);
        } catch (...) {
            ::close(go[1]);
            ::close(out[0]);
            ::kill(pid, SIGKILL);
            reap();
            throw;
        }
    }
    ssize_t w;
    do w = ::write(go[1], "g", 1);
    while (w < 0 && errno == EINTR);
    ::close(go[1]);
    // A Ctrl-C that arrived before the child existed has not been forwarded yet.
    if (g_signal) ::kill(pid, g_signal);

    ChildResult r;
    std::string pending;
    char buf[4096];
    double interrupt_at_ms = -1;
    auto now_ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
    auto last_tick = now_ms();
    for (;;) {
        struct pollfd p {out[0], POLLIN, 0};
        const int rc = ::poll(&p, 1, tick_ms);
        if (rc > 0) {
            const ssize_t n = ::read(out[0], buf, sizeof buf);
            if (n == 0) break;
            if (n > 0) {
                r.output_tail.append(buf, n);
                if (r.output_tail.size() > 2 * kTailBytes) r.output_tail.erase(0, r.output_tail.size() - kTailBytes);
                pending.append(buf, n);
                size_t nl;
                while ((nl = pending.find('\n')) != std::string::npos) {
                    if (on_line) on_line(pending.substr(0, nl));
                    pending.erase(0, nl + 1);
                }
            } else if (errno != EINTR && errno != EAGAIN) {
                break;
            }
        } else if (rc < 0 && errno != EINTR) {
            break;
        }
        const double t = now_ms();
        if (on_tick && t - last_tick >= tick_ms) {
            on_tick();
            last_tick = t;
        }
        if (g_signal && interrupt_at_ms < 0) interrupt_at_ms = t;
        if (interrupt_at_ms >= 0 && t - interrupt_at_ms > kGraceMs) ::kill(pid, SIGKILL);
    }
    ::close(out[0]);
    if (!pending.empty() && on_line) on_line(pending);
    if (on_tick) on_tick();
    const int st = reap();
    r.wall_ms = now_ms();
    if (r.output_tail.size() > kTailBytes) r.output_tail.erase(0, r.output_tail.size() - kTailBytes);
    if (WIFEXITED(st)) {
        r.exited = true;
        r.exit_code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r.signal = WTERMSIG(st);
    }
    r.interrupted = g_signal != 0;
    return r;
}

}  // namespace bgh
