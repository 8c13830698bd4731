// Runs a prompt through the model in the chosen prefill order, then decodes greedily.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <functional>

#include "model/dsv41_forward.h"
#include "runtime/sampler.h"

namespace bg {

enum class PrefillOrder { kTokenMajor, kLayerMajor };
PrefillOrder parse_prefill_order(const std::string& s);  // "token-major" | "layer-major"
const char* prefill_order_name(PrefillOrder o);

// Prompt token ids: n ids drawn uniformly from [3, n_vocab) by a seeded generator (0-2 are
// bos/eos/pad), starting with bos; or read from a file of whitespace-separated ids.
std::vector<int32_t> random_prompt(int64_t n, uint64_t seed, int64_t n_vocab, int32_t bos);
std::vector<int32_t> read_prompt_file(const std::string& path, int64_t n_vocab);

class Runner {
public:
    Runner(const dsv41::Model& m, dsv41::Forward& fwd);

    // Processes `prompt` from position 0 (the sequence is reset first). Fills `last_logits`
    // [n_vocab] for the final prompt token and, when `all_logits` is not null, [n][n_vocab]
    // for every prompt token.
    void prefill(const std::vector<int32_t>& prompt, PrefillOrder order, int64_t ubatch,
                 std::vector<float>* last_logits, std::vector<float>* all_logits = nullptr);

    // Decoding after prefill: n_gen tokens, the first taken from `logits` (the prompt's last
    // logits), each later one from a one-token step. `logits` is updated in place. Greedy
    // without a sampler; `on_token` (when set) sees each token as soon as it is chosen.
    std::vector<int32_t> decode(std::vector<float>& logits, int64_t n_gen, Sampler* sampler = nullptr,
                                const std::function<void(int32_t)>& on_token = {});

    int64_t n_past() const { return n_past_; }

private:
    const dsv41::Model& m_;
    dsv41::Forward& fwd_;
    std::vector<dsv41::Ubatch> units_;  // layer-major keeps every unit of the prompt alive
    std::vector<dsv41::Ubatch*> unit_ptrs_;
    int64_t n_past_ = 0;
};

}  // namespace bg
