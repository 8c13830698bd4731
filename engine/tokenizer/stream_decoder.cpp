#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace bg::tok {

std::string StreamDecoder::push(int32_t id) {
    held_ += t_.piece(id);
    const size_t keep = incomplete_utf8_tail(held_);
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StreamDecoder::finish() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace bg::tok
