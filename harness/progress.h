// What the engine says while it runs, and what the harness shows of it: the engine prints one
// line per finished prefill pass and one for decode; those lines drive the progress display on
// a terminal and are what remains of a run that was interrupted or OOM-killed before it could
// write its metrics file.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace bgh {

// "pass 2 (warm): prefill 64 tokens in 650.5 ms = 98.38 tok/s | disk read 51.98 % | disk wait
// 30.9 ms | vram 200 host 599 disk 865 fetches | pcie 19.1 MB" as the metrics it states.
std::optional<nlohmann::json> parse_pass_line(const std::string& line);
// "decode: 16 tokens, 26.31 tok/s".
std::optional<nlohmann::json> parse_decode_line(const std::string& line);

// One status line on a terminal, rewritten in place; silent when output is not a terminal.
class Progress {
public:
    explicit Progress(bool enabled) : enabled_(enabled) {}
    ~Progress() { finish(); }
    bool enabled() const { return enabled_; }

    void set_scenario(const std::string& name) { scenario_ = name; }
    // A new engine run starts: which scenario, which configuration and repetition, and how much
    // work it has.
    void start_run(const std::string& scenario, const std::string& what, int64_t passes, int64_t prompt_tokens,
                   int64_t decode_tokens);
    void engine_line(const std::string& line);
    void note(const std::string& text);  // a step that is not an engine run (model generation)
    void tick();                         // redraws the elapsed time
    void finish();                       // ends the line

private:
    void draw();
    bool enabled_;
    bool drawn_ = false;
    std::string scenario_, what_, note_, last_;
    int64_t passes_ = 0, prompt_ = 0, decode_ = 0, passes_done_ = 0;
    bool decoded_ = false;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace bgh
