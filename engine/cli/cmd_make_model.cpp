#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf_split.h"
#include "model/make_model.h"
#include "tokenizer/hf_import.h"

namespace bg::cli {

namespace {

bool has_tokenizer(const std::string& dir) {
    struct stat st;
    return ::stat((dir + "/tokenizer.json").c_str(), &st) == 0;
}

}  // namespace

// Where make-model finds the tokenizer it embeds (plan tokenizes a scale's text prompt with it).
std::string default_tokenizer_dir() {
    const std::string in_tree = tok::npm_tokenizer_dir(BG_PROJECT_ROOT);
    if (has_tokenizer(in_tree)) return in_tree;
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        std::string beside(exe, static_cast<size_t>(n));
        beside = beside.substr(0, beside.rfind('/')) + "/tokenizer";
        if (has_tokenizer(beside)) return beside;
    }
    return in_tree;
}

void register_make_model(CLI::App& app) {
    auto* cmd = app.add_subcommand("make-model", "Write a deterministic random-weight dsv41 GGUF at a given scale");
    static MakeModelConfig cfg;
    cmd->add_option("--scale", cfg.scale_path, "Scale file (scenarios/models/{ci,device,full}.json)")->required();
    cmd->add_option("--out", cfg.out_path, "Output GGUF path")->required();
    cmd->add_option("--seed", cfg.seed, "Seed: the same seed gives the same bytes")->capture_default_str();
    cmd->add_option("--threads", cfg.threads, "Worker threads (0: all cores)")->capture_default_str();
    // The vocabulary setup-deps installs with npm, found through the source tree this binary
    // was built from; a binary staged for another machine (scripts/device-stage.sh) finds a copy
    // in tokenizer/ beside itself.
    static std::string tokenizer_dir = default_tokenizer_dir();
    static bool no_tokenizer = false;
    static std::string quant;
    cmd->add_option("--quant", quant,
                    "llama-quantize preset: MXFP4_MOE, Q8_0, Q4_K_M, Q2_K or IQ2_XXS (any case). Each tensor gets "
                    "the type llama-quantize's rules give it (output Q6_K, Q5_K for IQ2_XXS, Q8_0 for MXFP4_MOE and "
                    "Q8_0; ffn_down a step up: Q3_K for Q2_K, Q6_K on Q4_K_M's use_more_bits layers, Q2_K on "
                    "IQ2_XXS's first n_layer/8; 1-D weights, routers and engram_q/k F32); a tensor whose rows are "
                    "not whole 256-weight blocks gets Q8_0 where llama.cpp would pick Q4_0, Q5_0, Q5_1 or IQ4_NL, "
                    "which this engine lacks. Recorded as general.file_type. Default: the scale's types (its "
                    "\"quant\" key, else dense_type, expert_type, engram_type, router_type)");
    cmd->add_option("--tokenizer", tokenizer_dir, "Folder with tokenizer.json and tokenizer_config.json to embed")
        ->capture_default_str();
    cmd->add_flag("--no-tokenizer", no_tokenizer, "Embed no tokenizer");
    static std::string engram_format;
    cmd->add_option("--engram-format", engram_format,
                    "Engram tables as q8_0, fork-fp8 (FP8-E4M3 bytes + E8M0 scales, as tarruda/llama.cpp's converter "
                    "writes them) or any tensor type name (default: the scale's engram_type)");
    static std::string split_max_size;
    cmd->add_option("--split-max-size", split_max_size,
                    "Write shards as llama.cpp's gguf-split --split-max-size does: at most N tensor bytes each "
                    "(N, NK, NM or NG: 1e3, 1e6, 1e9 bytes), named --out less .gguf plus -00001-of-0000K.gguf");
    cmd->callback([] {
        cfg.split_max_bytes = split_max_size.empty() ? 0 : gguf::parse_split_max_size(split_max_size);
        ModelScale s = load_scale(cfg.scale_path);
        if (!engram_format.empty()) s.engram_format = parse_engram_format(engram_format);
        if (!quant.empty()) s.quant = parse_quant_preset(quant);
        const bool have = has_tokenizer(tokenizer_dir);
        if (no_tokenizer) {
            cfg.tokenizer_dir.clear();
        } else if (!have) {
            std::fprintf(stderr, "make-model: no tokenizer at %s (scripts/setup-deps.sh installs it): the model "
                                 "gets none and runs on token ids only\n", tokenizer_dir.c_str());
            cfg.tokenizer_dir.clear();
        } else if (s.hp.n_vocab < tok::kDeepSeekVocabRows) {
            std::fprintf(stderr, "make-model: scale %s has %lld vocabulary rows, fewer than DeepSeek's %lld: the model "
                                 "gets no tokenizer and runs on token ids only\n", s.name.c_str(), (long long)s.hp.n_vocab,
                         (long long)tok::kDeepSeekVocabRows);
            cfg.tokenizer_dir.clear();
        } else {
            cfg.tokenizer_dir = tokenizer_dir;
        }
        std::fprintf(stderr, "make-model: scale %s (%s), seed %llu, Engram %s -> %s\n", s.name.c_str(),
                     cfg.scale_path.c_str(), (unsigned long long)cfg.seed, s.engram_format.name().c_str(),
                     cfg.out_path.c_str());
        const MakeModelResult r = make_model(s, cfg);
        std::fprintf(stderr, "make-model: wrote %.3f GB in %.1f s (%.0f MB/s), file type %s\n", r.file_bytes / 1e9,
                     r.seconds, r.file_bytes / 1e6 / std::max(r.seconds, 1e-3),
                     r.file_type ? quant_preset_name(*r.file_type) : "not recorded (a mix no llama-quantize preset makes)");
        if (cfg.split_max_bytes > 0) {
            std::fprintf(stderr, "make-model: %zu shards; open the model with -m %s\n", r.paths.size(), r.paths[0].c_str());
            for (const std::string& p : r.paths) std::fprintf(stderr, "  %s\n", p.c_str());
        }
        if (r.tokenizer_tokens > 0)
            std::fprintf(stderr, "make-model: embedded the DeepSeek-V3 tokenizer (%lld tokens) from %s\n",
                         (long long)r.tokenizer_tokens, cfg.tokenizer_dir.c_str());
    });
}

}  // namespace bg::cli
