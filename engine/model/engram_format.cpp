#include "model/engram_format.h"

#include "tensor/fp8_rows.h"
#include "util/check.h"

namespace bg {

namespace {
constexpr const char* kForkFp8Name = "fork-fp8";
}  // namespace

std::string EngramFormat::name() const { return fork() ? kForkFp8Name : type_name(type); }

std::string EngramFormat::describe() const {
    if (fork()) return "fork-fp8: FP8-E4M3 values (i8) + E8M0 scales per 32 (i8), tarruda/llama.cpp's converter";
    return type_name(type);
}

bool EngramFormat::row_fits(int64_t dim) const {
    if (fork()) return dim > 0 && dim % fp8::kGroup == 0;
    uint64_t b = 0;
    return dim > 0 && row_bytes_checked(type, dim, &b);
}

uint64_t EngramFormat::row_bytes(int64_t dim) const {
    BG_CHECK(row_fits(dim));
    return fork() ? static_cast<uint64_t>(fp8::packed_row_bytes(dim)) : bg::row_bytes(type, dim);
}

EngramFormat parse_engram_format(const std::string& text) {
    if (text == kForkFp8Name) return EngramFormat::fork_fp8();
    try {
        return EngramFormat::typed(parse_type_name(text));
    } catch (const Error& e) {
        fail("Engram format '%s' is neither %s nor a tensor type the engine reads (%s)", text.c_str(), kForkFp8Name,
             e.what());
    }
}

void dequantize_engram_rows(const EngramFormat& f, const uint8_t* src, float* dst, int64_t rows, int64_t dim) {
    if (f.fork()) fp8::dequantize_packed_rows(src, dst, rows, dim);
    else dequantize_row(f.type, src, dst, rows * dim);  // rows of one table share a size: one run
}

void dequantize_engram_rows(Ops& ops, const EngramFormat& f, const uint8_t* src, float* dst, int64_t rows, int64_t dim) {
    if (f.fork()) ops.dequantize_fp8_rows(src, dst, rows, dim);
    else ops.dequantize(f.type, src, dst, rows * dim);
}

}  // namespace bg
