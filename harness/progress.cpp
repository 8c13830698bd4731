#include "progress.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace bgh {

std::optional<nlohmann::json> parse_pass_line(const std::string& line) {
    long long pass = 0, tokens = 0;
    unsigned long long vram = 0, host = 0, disk = 0;
    char state[16] = {0};
    double ms = 0, tok_s = 0, pct = 0, wait_ms = 0, pcie_mb = 0;
    const int n = std::sscanf(line.c_str(),
                              "pass %lld (%15[a-z]): prefill %lld tokens in %lf ms = %lf tok/s | disk read %lf %% | "
                              "disk wait %lf ms | vram %llu host %llu disk %llu fetches | pcie %lf MB",
                              &pass, state, &tokens, &ms, &tok_s, &pct, &wait_ms, &vram, &host, &disk, &pcie_mb);
    if (n < 7) return std::nullopt;
    nlohmann::json j = {{"pass", pass},           {"state", state},          {"prompt_tokens", tokens},
                        {"prefill_ms", ms},       {"prefill_tok_s", tok_s},  {"disk_read_pct", pct},
                        {"disk_wait_ms", wait_ms}, {"from_engine_log", true}};
    if (n == 11) {
        j["experts"] = {{"vram_hits", vram}, {"host_hits", host}, {"disk_fetches", disk}};
        j["pcie_mb"] = pcie_mb;
    }
    return j;
}

std::optional<nlohmann::json> parse_decode_line(const std::string& line) {
    long long tokens = 0;
    double tok_s = 0;
    if (std::sscanf(line.c_str(), "decode: %lld tokens, %lf tok/s", &tokens, &tok_s) != 2) return std::nullopt;
    return nlohmann::json{{"tokens", tokens}, {"decode_tok_s", tok_s}, {"from_engine_log", true}};
}

void Progress::start_run(const std::string& scenario, const std::string& what, int64_t passes, int64_t prompt_tokens,
                         int64_t decode_tokens) {
    scenario_ = scenario;
    what_ = what;
    note_.clear();
    passes_ = passes;
    prompt_ = prompt_tokens;
    decode_ = decode_tokens;
    passes_done_ = 0;
    decoded_ = false;
    t0_ = std::chrono::steady_clock::now();
    draw();
}

void Progress::engine_line(const std::string& line) {
    if (parse_pass_line(line)) ++passes_done_;
    else if (parse_decode_line(line)) decoded_ = true;
    else return;
    draw();
}

void Progress::note(const std::string& text) {
    note_ = text;
    t0_ = std::chrono::steady_clock::now();
    draw();
}

void Progress::tick() { draw(); }

void Progress::draw() {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::string text;
    if (!note_.empty()) {
        text = "[" + scenario_ + "] " + note_;
    } else {
        char b[256];
        std::snprintf(b, sizeof b, ": pass %lld/%lld, %lld/%lld prompt tokens, %lld/%lld decoded",
                      (long long)passes_done_, (long long)passes_, (long long)(passes_done_ * prompt_),
                      (long long)(passes_ * prompt_), (long long)(decoded_ ? decode_ : 0), (long long)decode_);
        text = "[" + scenario_ + "] " + what_ + b;
    }
    char t[32];
    std::snprintf(t, sizeof t, " (%.0f s)", s);
    text += t;
    // Ticks come ten times a second; a terminal only needs the line when it changes.
    if (drawn_ && text == last_) return;
    last_ = text;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
    drawn_ = true;
}

void Progress::finish() {
    if (enabled_ && drawn_) {
        std::fputs("\n", stderr);
        std::fflush(stderr);
    }
    drawn_ = false;
    last_.clear();
}

}  // namespace bgh
