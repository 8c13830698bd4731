// Runs one child process (the engine, make-model, a probe) the way a measurement needs it: placed
// in its memory cgroup before it executes a single instruction of its own, its merged output
// read line by line while it runs, and Ctrl-C forwarded to it so the harness can still write
// what was measured.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace bgh {

class MemoryCgroup;

struct ChildResult {
    bool exited = false;    // exited normally with exit_code
    int exit_code = -1;
    int signal = 0;         // the signal that killed it, when it did not exit
    bool interrupted = false;  // the harness was asked to stop while the child ran
    double wall_ms = 0;
    std::string output_tail;   // the last few KiB of its stdout and stderr, merged
    bool ok() const { return exited && exit_code == 0; }
    std::string describe() const;  // "exit code 1", "killed by signal 9 (Killed)"
};

// SIGINT and SIGTERM no longer end the harness: they are recorded and passed on to the running
// child, and the harness finishes its bookkeeping. Call once at start-up.
void install_interrupt_handlers();
bool interrupt_requested();
int interrupt_signal();      // the signal received, 0 if none
void clear_interrupt();      // for tests

// Runs argv[0] (a path) with argv. When `cg` is given the child is attached to it before exec.
// `on_line` sees every output line as it arrives; `on_tick` runs about every `tick_ms` while the
// child lives (cgroup sampling). Throws std::runtime_error only when the child cannot be started.
ChildResult run_child(const std::vector<std::string>& argv, MemoryCgroup* cg,
                      const std::function<void(const std::string&)>& on_line = {},
                      const std::function<void()>& on_tick = {}, int tick_ms = 100);

}  // namespace bgh
