// matmul (dequantise a chunk of weight rows, then one SGEMM) and the embedding gather: the two
// users of strided ggml row decoding.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "cuda/check.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.cuh"
#include "cuda/launch.cuh"
#include "tensor/qtypes/iq2_xxs.h"
#include "tensor/qtypes/q2_k.h"
#include "tensor/qtypes/q3_k.h"
#include "tensor/qtypes/q4_k.h"
#include "tensor/qtypes/q5_k.h"
#include "tensor/qtypes/q6_k.h"
#include "util/check.h"

namespace bg::cuda {

namespace {

__device__ __forceinline__ uint32_t load_u16(const uint8_t* b) {
    return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8);
}

// Rows of a strided matrix need not be aligned beyond a byte: every load below is a byte load.
__device__ __forceinline__ float load_f32(const uint8_t* b) {
    return __uint_as_float(load_u16(b) | (load_u16(b + 2) << 16));
}

// MXFP4 as the CPU decodes it (ggml's way): the doubled E2M1 value, an integer, times
// 2^(e-128), which is a float for every e. Products are exact wherever representable, so this
// is bit-equal to dequantize_row, the overflow to inf at e = 255 and +0 for code 8 included.
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}
__device__ __forceinline__ float e2m1_doubled(uint32_t code) {
    const uint32_t m = code & 7u;  // doubled magnitudes 0 1 2 3 4 6 8 12
    const float mag = static_cast<float>(m < 4 ? m : (m < 6 ? (m - 2) * 2 : (m - 4) * 4));
    return (code & 8u) ? 0.0f - mag : mag;
}

__device__ __forceinline__ float fp16_bits(uint32_t h) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// Element i of one ggml row, decoded exactly as dequantize_row does.
__device__ __forceinline__ float ggml_element(uint32_t type, const uint8_t* row, int64_t i) {
    switch (type) {
        case static_cast<uint32_t>(GgmlType::F32): return load_f32(row + 4 * i);
        case static_cast<uint32_t>(GgmlType::F16): return fp16_bits(load_u16(row + 2 * i));
        case static_cast<uint32_t>(GgmlType::BF16): return __uint_as_float(load_u16(row + 2 * i) << 16);
        case static_cast<uint32_t>(GgmlType::Q8_0): {
            const uint8_t* blk = row + (i / 32) * 34;
            return fp16_bits(load_u16(blk)) * static_cast<float>(static_cast<int8_t>(blk[2 + i % 32]));
        }
        case static_cast<uint32_t>(GgmlType::MXFP4): {
            const uint8_t* blk = row + (i / 32) * 17;
            const int j = static_cast<int>(i % 32);
            const uint8_t byte = blk[1 + (j & 15)];
            return e2m1_doubled(j < 16 ? (byte & 0xFu) : (byte >> 4)) * e8m0_half(blk[0]);
        }
        // The 256-weight types through their traits' decoders, the ones dequantize_row calls.
        case static_cast<uint32_t>(GgmlType::Q2_K): return qtypes::Q2_K::row_element(row, i);
        case static_cast<uint32_t>(GgmlType::Q3_K): return qtypes::Q3_K::row_element(row, i);
        case static_cast<uint32_t>(GgmlType::Q4_K): return qtypes::Q4_K::row_element(row, i);
        case static_cast<uint32_t>(GgmlType::Q5_K): return qtypes::Q5_K::row_element(row, i);
        case static_cast<uint32_t>(GgmlType::Q6_K): return qtypes::Q6_K::row_element(row, i);
        case static_cast<uint32_t>(GgmlType::IQ2_XXS): return qtypes::Iq2_XXS::row_element(row, i);
        default: return __int_as_float(0x7fc00000);  // unknown type: NaN, visible downstream
    }
}

// Four weights from i of a row of 256-weight blocks (one 16-weight group: one scale decode).
template <class T>
__device__ __forceinline__ float4 super_block_element4(const uint8_t* row, int64_t i) {
    float v[4];
    T::row_decode(row, i, 4, v);
    return make_float4(v[0], v[1], v[2], v[3]);
}

// Elements i..i+3 (i a multiple of 4, so all four share one Q8_0/MXFP4 block and one nibble
// half, or one 16-weight group of a 256-weight block): one scale decode and one 16-byte store
// per thread instead of four of each.
__device__ __forceinline__ float4 ggml_element4(uint32_t type, const uint8_t* row, int64_t i) {
    switch (type) {
        case static_cast<uint32_t>(GgmlType::Q2_K): return super_block_element4<qtypes::Q2_K>(row, i);
        case static_cast<uint32_t>(GgmlType::Q3_K): return super_block_element4<qtypes::Q3_K>(row, i);
        case static_cast<uint32_t>(GgmlType::Q4_K): return super_block_element4<qtypes::Q4_K>(row, i);
        case static_cast<uint32_t>(GgmlType::Q5_K): return super_block_element4<qtypes::Q5_K>(row, i);
        case static_cast<uint32_t>(GgmlType::Q6_K): return super_block_element4<qtypes::Q6_K>(row, i);
        case static_cast<uint32_t>(GgmlType::IQ2_XXS): return super_block_element4<qtypes::Iq2_XXS>(row, i);
        case static_cast<uint32_t>(GgmlType::Q8_0): {
            const uint8_t* blk = row + (i / 32) * 34;
            const float d = fp16_bits(load_u16(blk));
            const uint8_t* q = blk + 2 + i % 32;
            return make_float4(d * static_cast<float>(static_cast<int8_t>(q[0])), d * static_cast<float>(static_cast<int8_t>(q[1])),
                               d * static_cast<float>(static_cast<int8_t>(q[2])), d * static_cast<float>(static_cast<int8_t>(q[3])));
        }
        case static_cast<uint32_t>(GgmlType::MXFP4): {
            const uint8_t* blk = row + (i / 32) * 17;
            const int j = static_cast<int>(i % 32);
            const float d = e8m0_half(blk[0]);
            const uint8_t* q = blk + 1 + (j & 15);
            const int shift = j < 16 ? 0 : 4;
            return make_float4(e2m1_doubled((q[0] >> shift) & 0xFu) * d, e2m1_doubled((q[1] >> shift) & 0xFu) * d,
                               e2m1_doubled((q[2] >> shift) & 0xFu) * d, e2m1_doubled((q[3] >> shift) & 0xFu) * d);
        }
        default:
            return make_float4(ggml_element(type, row, i), ggml_element(type, row, i + 1), ggml_element(type, row, i + 2),
                               ggml_element(type, row, i + 3));
    }
}

// out[r][i] = W[r][i] for r < n_rows, i < cols; out dense [n_rows][cols]. Grid: x over columns,
// y (striding) over rows.
__global__ void dequant_rows_kernel(uint32_t type, const uint8_t* w, uint64_t row_stride, int64_t cols,
                                    int64_t n_rows, float* out) {
    grid_dependency_begin();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= cols) return;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y)
        out[r * cols + i] = ggml_element(type, w + static_cast<uint64_t>(r) * row_stride, i);
}

// The same for cols a multiple of 4, four elements per thread (out is 16-byte aligned: the
// scratch comes from cudaMalloc and every row is a multiple of 16 bytes).
__global__ void dequant_rows4_kernel(uint32_t type, const uint8_t* w, uint64_t row_stride, int64_t cols,
                                     int64_t n_rows, float* out) {
    grid_dependency_begin();
    const int64_t i = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
    if (i >= cols) return;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y)
        *reinterpret_cast<float4*>(out + r * cols + i) = ggml_element4(type, w + static_cast<uint64_t>(r) * row_stride, i);
}

__global__ void embed_kernel(uint32_t type, const uint8_t* emb, uint64_t row_stride, int64_t rows, int64_t cols,
                             const int32_t* tokens, int64_t n_tok, float* H) {
    grid_dependency_begin();
    const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (e >= cols) return;
    for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
        const int32_t id = tokens[t];
        const float v = id >= 0 && id < rows ? ggml_element(type, emb + static_cast<uint64_t>(id) * row_stride, e)
                                             : __int_as_float(0x7fc00000);
        float* h = H + t * 4 * cols;  // [4][cols]
        for (int c = 0; c < 4; ++c) h[c * cols + e] = v;
    }
}

// F32 weights times at most kGemvF32MaxTokens tokens: y[t*ldy + r] = W[r] . x[t], one block a
// row, the row read once as float4 (rows 16-byte aligned, cols a multiple of 4), x as floats
// (any ldx). A decode layer's router (384 x 5120 F32) went to cuBLAS, whose GEMV is launched
// plainly: it started 6-7 us after the copy before it and ran 6.3 us (c9ed0e0's H100 trace). This
// one is chained (launch.cuh). Products are FMAs, sums fixed in order by the block's shape: the
// same bits every run.
constexpr int kGemvF32Threads = 128;
constexpr int64_t kGemvF32MaxTokens = 4;

template <int NT>
__global__ void __launch_bounds__(kGemvF32Threads)
    gemv_f32_kernel(const float* W, int64_t ld_w, int64_t cols, const float* x, int64_t ldx, float* y, int64_t ldy) {
    grid_dependency_begin();
    __shared__ float red[33];
    const int64_t r = blockIdx.x;
    const float4* w4 = reinterpret_cast<const float4*>(W + r * ld_w);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < cols / 4; i += kGemvF32Threads) {
        const float4 w = w4[i];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float* xt = x + t * ldx + 4 * i;
            acc[t] = fmaf(w.w, xt[3], fmaf(w.z, xt[2], fmaf(w.y, xt[1], fmaf(w.x, xt[0], acc[t]))));
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float sum = block_sum(acc[t], red);
        if (threadIdx.x == 0) y[t * ldy + r] = sum;
    }
}

void check_mat(const DeviceMat& W) {
    BG_CHECK(type_traits(static_cast<uint32_t>(W.type)) != nullptr);
    BG_CHECK(W.cols > 0 && W.rows >= 0);
    BG_CHECK(W.row_stride >= row_bytes(W.type, W.cols));
    BG_CHECK(W.data != nullptr || W.rows == 0);
}

}  // namespace

MatmulContext::MatmulContext(uint64_t scratch_bytes) : scratch_bytes_(scratch_bytes) {
    int dev = 0, major = 0;
    BG_CUDA_CHECK(cudaGetDevice(&dev));
    BG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    // cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before.
    workspace_bytes_ = major >= 9 ? (uint64_t{32} << 20) : (uint64_t{4} << 20);
    if (scratch_bytes_ > 0) BG_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_), scratch_bytes_));
    BG_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
    BG_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    BG_CUBLAS_CHECK(cublasCreate(&handle_));
    // Plain FP32 FMA: TF32 tensor cores would be ~1e-3 off the CPU instead of ~1e-6.
    BG_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    BG_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
}

MatmulContext::~MatmulContext() {
    // No checks here: a destructor running after a device fault must not abort a second time.
    if (handle_) cublasDestroy(handle_);
    if (done_) cudaEventDestroy(done_);
    if (workspace_) cudaFree(workspace_);
    if (scratch_) cudaFree(scratch_);
}

int64_t MatmulContext::chunk_rows(int64_t cols) const {
    BG_CHECK(cols > 0);
    const uint64_t rows = scratch_bytes_ / (sizeof(float) * static_cast<uint64_t>(cols));
    BG_CHECK_MSG(rows >= 1, "matmul scratch smaller than one dequantised weight row");
    return static_cast<int64_t>(std::min<uint64_t>(rows, INT_MAX));
}

void MatmulContext::bind(cudaStream_t stream) {
    if (bound_ && stream == stream_) return;
    // The scratch may still be read by the last call's GEMM on the old stream.
    if (bound_) BG_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
    BG_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    // Setting the stream resets the handle to cuBLAS's own workspace pool; give it ours back.
    BG_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
    stream_ = stream;
    bound_ = true;
}

void matmul(MatmulContext& ctx, const DeviceMat& W, const float* x, int64_t ldx, int64_t n_tok, float* y,
            int64_t ldy, cudaStream_t stream) {
    check_mat(W);
    BG_CHECK(n_tok <= 1 || (ldx >= W.cols && ldy >= W.rows));
    if (W.rows == 0 || n_tok <= 0) return;
    BG_CHECK(W.cols <= INT_MAX && W.rows <= INT_MAX && n_tok <= INT_MAX && ldx <= INT_MAX && ldy <= INT_MAX);
    ctx.bind(stream);

    // Row-major y[n_tok][ldy] = x[n_tok][ldx] * W^T is, read column-major, the cols x n_tok
    // matrix X times the rows x cols matrix W^T: C (rows x n_tok, ldc = ldy) = A^T B with
    // A = W read as cols x rows (lda = elements per row) and B = x (ldb = ldx).
    const int k = static_cast<int>(W.cols), n = static_cast<int>(n_tok);
    // With one token the leading dimensions are never stepped; cuBLAS still wants them >= the
    // column length.
    const int ldb = static_cast<int>(std::max(ldx, W.cols));
    const float alpha = 1.0f, beta = 0.0f;

    const bool direct = W.type == GgmlType::F32 && W.row_stride % sizeof(float) == 0 &&
                        reinterpret_cast<uintptr_t>(W.data) % alignof(float) == 0 &&
                        W.row_stride / sizeof(float) <= INT_MAX;
    const bool by_gemv = direct && n_tok <= kGemvF32MaxTokens && W.cols % 4 == 0 && W.row_stride % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(W.data) % 16 == 0 && W.rows <= INT_MAX;
    if (by_gemv) {
        const auto* w = reinterpret_cast<const float*>(W.data);
        const int64_t ld_w = static_cast<int64_t>(W.row_stride / sizeof(float));
        const unsigned grid = static_cast<unsigned>(W.rows);
        using GemvKernel = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t);
        constexpr GemvKernel kByTokens[kGemvF32MaxTokens] = {gemv_f32_kernel<1>, gemv_f32_kernel<2>, gemv_f32_kernel<3>,
                                                             gemv_f32_kernel<4>};
        BG_CUDA_CHECK(
            launch_kernel(kByTokens[n_tok - 1], grid, kGemvF32Threads, 0, stream, w, ld_w, W.cols, x, ldx, y, ldy));
    } else if (direct) {
        const int m = static_cast<int>(W.rows);
        BG_CUBLAS_CHECK(cublasSgemm(ctx.handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                                    reinterpret_cast<const float*>(W.data), static_cast<int>(W.row_stride / sizeof(float)),
                                    x, ldb, &beta, y, static_cast<int>(std::max<int64_t>(ldy, m))));
    } else {
        const int64_t chunk = ctx.chunk_rows(W.cols);
        const bool by4 = W.cols % 4 == 0;
        const int64_t threads_per_row = by4 ? W.cols / 4 : W.cols;
        for (int64_t r0 = 0; r0 < W.rows; r0 += chunk) {
            const int64_t rows = std::min(chunk, W.rows - r0);
            const dim3 grid = rows_grid(threads_per_row, rows);
            const uint8_t* src = W.data + static_cast<uint64_t>(r0) * W.row_stride;
            if (by4) {
                BG_CUDA_CHECK(launch_kernel(dequant_rows4_kernel, grid, kThreads, 0, stream,
                                            static_cast<uint32_t>(W.type), src, W.row_stride, W.cols, rows,
                                            ctx.scratch_));
            } else {
                BG_CUDA_CHECK(launch_kernel(dequant_rows_kernel, grid, kThreads, 0, stream,
                                            static_cast<uint32_t>(W.type), src, W.row_stride, W.cols, rows,
                                            ctx.scratch_));
            }
            BG_CUDA_CHECK_LAUNCH();
            const int m = static_cast<int>(rows);
            BG_CUBLAS_CHECK(cublasSgemm(ctx.handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, ctx.scratch_, k, x, ldb,
                                        &beta, y + r0, static_cast<int>(std::max<int64_t>(ldy, m))));
        }
    }
    BG_CUDA_CHECK(cudaEventRecord(ctx.done_, stream));
}

void embed_tokens(const DeviceMat& emb, const int32_t* tokens, int64_t n_tok, float* H, cudaStream_t stream) {
    check_mat(emb);
    if (n_tok <= 0) return;
    BG_CUDA_CHECK(launch_kernel(embed_kernel, rows_grid(emb.cols, n_tok), kThreads, 0, stream,
                                static_cast<uint32_t>(emb.type), emb.data, emb.row_stride, emb.rows, emb.cols, tokens,
                                n_tok, H));
}

}  // namespace bg::cuda
