#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>

#include "tokenizer/utf8.h"
#include "util/check.h"

namespace bg::tok {

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)), pre_(PreTokenizer::for_type(v_.pre)) {
    v_.validate();
    const size_t n = v_.tokens.size();
    std::unordered_map<std::string_view, int32_t> id_of;
    id_of.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) id_of.emplace(v_.tokens[i], static_cast<int32_t>(i));

    for (int b = 0; b < 256; ++b) {
        const auto it = id_of.find(alphabet_.text_of(static_cast<uint8_t>(b)));
        if (it == id_of.end()) fail("tokenizer: no token for byte 0x%02x", b);
        byte_token_[b] = it->second;
    }

    merges_.reserve(v_.merges.size() * 2);
    for (size_t r = 0; r < v_.merges.size(); ++r) {
        const std::string& m = v_.merges[r];
        const size_t sp = m.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
            fail("tokenizer: merge %zu '%s' is not two tokens separated by one space", r, m.c_str());
        const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
        const auto l = id_of.find(left), rt = id_of.find(right), res = id_of.find(left + right);
        if (l == id_of.end() || rt == id_of.end() || res == id_of.end())
            fail("tokenizer: merge %zu '%s' names a token that is not in the vocabulary", r, m.c_str());
        const uint64_t key = (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(rt->second);
        merges_.emplace(key, Merge{static_cast<uint32_t>(r), res->second});  // the first rank wins
    }

    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string& t = v_.tokens[i];
        switch (v_.types[i]) {
            case TokenType::kUnused:
                break;
            case TokenType::kControl:
            case TokenType::kUserDefined:
                pieces_[i] = t;
                if (!t.empty()) special_by_first_[static_cast<uint8_t>(t[0])].push_back(static_cast<int32_t>(i));
                break;
            default: {
                // Normal tokens are written in the byte alphabet; a code point outside it is
                // kept as its own UTF-8 (never the case in a byte-level vocabulary).
                const std::string valid = sanitize_utf8(t);
                for (size_t k = 0; k < valid.size();) {
                    const size_t at = k;
                    const int b = alphabet_.byte_of(next_code_point(valid, k));
                    if (b >= 0) pieces_[i] += static_cast<char>(b);
                    else pieces_[i].append(valid, at, k - at);
                }
            }
        }
    }
    for (auto& list : special_by_first_)
        std::stable_sort(list.begin(), list.end(),
                         [&](int32_t a, int32_t b) { return v_.tokens[a].size() > v_.tokens[b].size(); });
}

int32_t Tokenizer::merge_of(int32_t left, int32_t right, uint32_t& rank) const {
    const auto it = merges_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
    if (it == merges_.end()) return -1;
    rank = it->second.rank;
    return it->second.result;
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() == 1) {
        out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
        return;
    }
    // One symbol per byte in a linked list; candidate merges in a heap ordered by rank, then
    // position (the leftmost of equal pairs first). A candidate is stale when either side has
    // changed since it was pushed.
    struct Sym {
        int32_t id;
        int32_t prev, next;  // -1 at the ends
    };
    struct Cand {
        uint32_t rank;
        int32_t pos;
        int32_t left, right;  // the ids the pair had when pushed
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const int32_t n = static_cast<int32_t>(piece.size());
    std::vector<Sym> sym(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) sym[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int32_t a) {
        if (a < 0 || sym[a].next < 0) return;
        const int32_t b = sym[a].next;
        uint32_t rank = 0;
        if (merge_of(sym[a].id, sym[b].id, rank) >= 0) heap.push({rank, a, sym[a].id, sym[b].id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Sym& a = sym[c.pos];
        if (a.id != c.left || a.next < 0 || sym[a.next].id != c.right) continue;  // stale
        uint32_t rank = 0;
        a.id = merge_of(c.left, c.right, rank);
        const int32_t gone = a.next;
        a.next = sym[gone].next;
        if (a.next >= 0) sym[a.next].prev = c.pos;
        sym[gone].id = -1;
        push(a.prev);
        push(c.pos);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
    const std::string s = sanitize_utf8(text);
    std::vector<int32_t> out;
    if (add_special && v_.add_bos) out.push_back(static_cast<int32_t>(v_.bos_id));
    std::vector<std::string_view> pieces;
    auto plain = [&](size_t from, size_t to) {
        if (to <= from) return;
        pieces.clear();
        pre_.split(std::string_view(s).substr(from, to - from), pieces);
        for (std::string_view p : pieces) encode_piece(p, out);
    };
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
        int32_t found = -1;
        for (int32_t id : special_by_first_[static_cast<uint8_t>(s[i])]) {
            const std::string& t = v_.tokens[id];
            if (s.compare(i, t.size(), t) == 0) {
                found = id;
                break;
            }
        }
        if (found < 0) {
            ++i;
            continue;
        }
        plain(start, i);
        out.push_back(found);
        i += v_.tokens[found].size();
        start = i;
    }
    plain(start, s.size());
    if (add_special && v_.add_eos) out.push_back(static_cast<int32_t>(v_.eos_id));
    return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
    if (id < 0 || id >= size()) fail("tokenizer: token id %d is outside the vocabulary of %lld", id, (long long)size());
    return pieces_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) out += piece(id);
    return out;
}

}  // namespace bg::tok
