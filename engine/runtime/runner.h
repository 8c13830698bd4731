// Runs a prompt through the model in the chosen prefill order, then decodes greedily.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <functional>

#include "model/layer_forward.h"
#include "model/moe_model.h"
#include "util/named_enum.h"
#include "runtime/sampler.h"
#include "tokenizer/end_of_generation.h"

namespace bg {

enum class PrefillOrder { kTokenMajor, kLayerMajor };

// Where decoding ends. Without `ignore_eos`, at the first end-of-generation token (the last one
// returned) or after n_gen tokens, whichever comes first. With it, end-of-generation tokens are
// never chosen (their logits are set to -inf before each choice, as llama.cpp's --ignore-eos
// biases them) and exactly n_gen tokens come back.
struct DecodeStop {
    const tok::EndOfGeneration* eog = nullptr;  // null: the model has no end-of-generation tokens
    bool ignore_eos = false;
    // Whether a decode that returned `tokens` ended at an end-of-generation token.
    bool stopped_at(const std::vector<int32_t>& tokens) const {
        return !ignore_eos && eog && !tokens.empty() && eog->contains(tokens.back());
    }
};
template <>
struct EnumNames<PrefillOrder> {
    static constexpr NamedValue<PrefillOrder> kNames[] = {{PrefillOrder::kTokenMajor, "token-major"},
                                                          {PrefillOrder::kLayerMajor, "layer-major"}};
    static constexpr const char* kWhat = "--prefill";
};

// Prompt token ids: n ids drawn uniformly from [3, n_vocab) by a seeded generator (0-2 are
// bos/eos/pad), starting with bos; or read from a file of whitespace-separated ids.
std::vector<int32_t> random_prompt(int64_t n, uint64_t seed, int64_t n_vocab, int32_t bos);
std::vector<int32_t> read_prompt_file(const std::string& path, int64_t n_vocab);

class Runner {
public:
    Runner(const MoeModel& m, LayerForward& fwd);

    // Processes `prompt` from position 0 (the sequence is reset first). Fills `last_logits`
    // [n_vocab] for the final prompt token and, when `all_logits` is not null, [n][n_vocab]
    // for every prompt token.
    void prefill(const std::vector<int32_t>& prompt, PrefillOrder order, int64_t ubatch,
                 std::vector<float>* last_logits, std::vector<float>* all_logits = nullptr);

    // Decoding after prefill: up to n_gen tokens (`stop` says when fewer), the first taken from
    // `logits` (the prompt's last logits), each later one from a one-token step. Greedy without a
    // sampler (or with a greedy one): its steps choose on the device (LayerForward::greedy_token)
    // and `logits` is left as the first choice saw it; a drawing sampler's steps update `logits`
    // in place. `on_token` (when set) sees each token as soon as it is chosen, an
    // end-of-generation token included.
    std::vector<int32_t> decode(std::vector<float>& logits, int64_t n_gen, Sampler* sampler = nullptr,
                                const std::function<void(int32_t)>& on_token = {}, const DecodeStop& stop = {});

    int64_t n_past() const { return n_past_; }

private:
    const MoeModel& m_;
    LayerForward& fwd_;
    std::vector<Ubatch> units_;  // layer-major keeps every unit of the prompt alive
    std::vector<Ubatch*> unit_ptrs_;
    int64_t n_past_ = 0;
};

}  // namespace bg
