// The prompt a run was asked for, as token ids: text through the model's tokenizer (optionally
// in its chat format), a file of ids, or seeded random ids.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/moe_model.h"
#include "runtime/run_config.h"
#include "tokenizer/tokenizer.h"

namespace bg {

// The tokenizer the model file carries; null when it carries none. Throws bg::Error when it is
// malformed or its size differs from the model's vocabulary.
std::unique_ptr<tok::Tokenizer> load_tokenizer(const MoeModel& m);

// Throws bg::Error with the reason (text but no tokenizer, --chat without text, an empty
// text, an unknown chat template, a bad ids file).
std::vector<int32_t> build_prompt(const RunConfig& cfg, const MoeModel& m, const tok::Tokenizer* tokenizer);
// The same from the hyper-parameters alone (`plan` sizes a run from a header or a scale).
std::vector<int32_t> build_prompt(const RunConfig& cfg, int64_t n_vocab, uint32_t bos_id, const tok::Tokenizer* tokenizer);

}  // namespace bg
