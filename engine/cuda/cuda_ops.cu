#include "cuda/cuda_ops.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/dequant.cuh"
#include "cuda/int8_matmul.cuh"
#include "cuda/ops.cuh"
#include "cuda/quant_matmul.cuh"
#include "cuda/launch.cuh"
#include "util/check.h"

namespace bg::cuda {

namespace {

__global__ void scale_kernel(float* x, int64_t n, float s) {
    grid_dependency_begin();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] *= s;
}

class CudaOps final : public Ops {
public:
    CudaOps() {
        BG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        for (cudaEvent_t& e : fences_) BG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        BG_CUDA_CHECK(cudaEventCreate(&anchor_));
    }
    ~CudaOps() override {
        cudaStreamSynchronize(stream_);
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
        for (cudaEvent_t e : fences_) cudaEventDestroy(e);
        cudaEventDestroy(anchor_);
        for (void* p : allocations_) cudaFree(p);
        for (void* p : own_) cudaFree(p);
        mm_.reset();
        qws_.reset();
        i8ws_.reset();
        cudaStreamDestroy(stream_);
    }

    const char* name() const override { return "cuda"; }
    cudaStream_t stream() const { return stream_; }
    bool memory_is_host() const override { return false; }
    void* alloc(uint64_t bytes) override {
        void* p = nullptr;
        bytes = std::max<uint64_t>(1, bytes);
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess)
            fail("cuda ops: cannot allocate %llu bytes of device memory: %s", (unsigned long long)bytes, cudaGetErrorString(e));
        BG_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
        allocations_.push_back(p);
        return p;
    }
    void* alloc_host(uint64_t bytes) override {
        void* p = nullptr;
        bytes = std::max<uint64_t>(1, bytes);
        BG_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
        std::memset(p, 0, bytes);
        host_blocks_.push_back(
            {static_cast<uint8_t*>(p), bytes, static_cast<uint8_t*>(const_cast<void*>(host_view(p)))});
        return p;
    }
    void free_host(void* p) override {
        host_blocks_.erase(std::remove_if(host_blocks_.begin(), host_blocks_.end(),
                                          [p](const HostBlock& b) { return b.host == p; }),
                           host_blocks_.end());
        cudaFreeHost(p);
    }
    const void* host_view(const void* host) const override {
        void* on_device = nullptr;
        BG_CUDA_CHECK(cudaHostGetDevicePointer(&on_device, const_cast<void*>(host), 0));
        return on_device;
    }
    uint64_t own_bytes() const override { return own_bytes_; }
    uint64_t own_host_bytes() const override { return timeline_ ? timeline_->bytes() : 0; }
    void reserve(const OpsLimits& lim) override {
        BG_CHECK(events_.empty());
        // Two stretches' pairs: the last one's, counted at the next sync, and the one recording.
        events_.resize(static_cast<size_t>(4 * lim.busy_pairs));
        pair_beside_.resize(events_.size() / 2);
        for (cudaEvent_t& e : events_) BG_CUDA_CHECK(cudaEventCreate(&e));
        timeline_ = std::make_unique<Timeline>(lim.timeline_capacity);
        // The matmul paths the model's weights take (backend/matmul_plan.h), sized once.
        lim_ = lim;
        const MatmulNeeds& mn = lim.matmul;
        if (mn.int8_max_cols > 0) {
            i8ws_ = std::make_unique<Int8Workspace>(mn.int8_max_cols, mn.int8_max_ff);
            own_bytes_ += i8ws_->bytes();
        }
        if (mn.quant_max_cols > 0) {
            qws_ = std::make_unique<QuantMatmulWorkspace>(mn.quant_max_cols, mn.quant_max_ff);
            own_bytes_ += qws_->bytes();
        }
        if (mn.sgemm) {
            mm_ = std::make_unique<MatmulContext>(mn.dequant_bytes);
            own_bytes_ += mm_->scratch_bytes();
        }
        if (const uint64_t pb = attention_partial_bytes(lim); pb > 0) {
            att_part_.data = own_floats(static_cast<int64_t>(pb / sizeof(float)));
            att_part_.slots = kAttentionPartialSlots;
            att_part_.d = lim.head_dim;
        }
        if (lim.experts_unfused) {
            for (float** p : {&xg_, &eo_}) *p = own_floats(expert_work_floats_x(lim));
            for (float** p : {&g_, &up_, &h_}) *p = own_floats(expert_work_floats_ff(lim));
        }
        argmax_word_ = reinterpret_cast<unsigned long long*>(own_floats(kArgmaxWordBytes / sizeof(float)));
        BG_CUDA_CHECK(cudaMemset(argmax_word_, 0, kArgmaxWordBytes));
        BG_CHECK(own_bytes_ == cuda_ops_device_bytes(lim));
    }

    // Copies of at most kKernelCopyMaxBytes go by kernel (small_copy.cu) where the host end is
    // this object's alloc_host memory, whose device address the kernel reads or writes; the rest
    // through the copy engine.
    void upload(void* dst, const void* src, uint64_t bytes) override {
        if (const void* on_device = small_host_block(src, bytes))
            cuda::copy_bytes(dst, on_device, bytes, stream_);
        else
            BG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    }
    void download(void* dst, const void* src, uint64_t bytes) override {
        if (void* on_device = small_host_block(dst, bytes))
            cuda::copy_bytes(on_device, src, bytes, stream_);
        else
            BG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    void copy(void* dst, const void* src, uint64_t bytes) override {
        if (bytes <= kKernelCopyMaxBytes)
            cuda::copy_bytes(dst, src, bytes, stream_);
        else
            BG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    void copy_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t width, int64_t rows) override {
        if (static_cast<uint64_t>(width) * static_cast<uint64_t>(rows) * sizeof(float) <= kKernelCopyMaxBytes)
            cuda::copy_rows(dst, ld_dst, src, ld_src, width, rows, stream_);
        else
            BG_CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(float), src, ld_src * sizeof(float),
                                            width * sizeof(float), rows, cudaMemcpyDeviceToDevice, stream_));
    }
    void zero(void* x, uint64_t bytes) override { BG_CUDA_CHECK(cudaMemsetAsync(x, 0, bytes, stream_)); }

    void sync() override {
        // The pairs the last sync saw complete are counted now, while the device still works,
        // not once this sync returns: the host's next launches wait for that (two event reads a
        // pair, about 8 pairs a decode layer).
        count_completed_pairs();
        BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
        events_completed_ = events_used_;  // every pair recorded so far has completed
    }
    void record_fence(int i) override { BG_CUDA_CHECK(cudaEventRecord(fences_[i], stream_)); }
    void wait_event(DeviceEvent e) override {
        if (e) BG_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(const_cast<void*>(e.handle)), 0));
    }
    void wait_host_word(const uint32_t* word_host, uint32_t value) override {
        cuda::wait_host_word(word_host, value, stream_);
    }
    bool fence_passed(int i, bool wait) override {
        if (wait) {
            BG_CUDA_CHECK(cudaEventSynchronize(fences_[i]));
            return true;
        }
        const cudaError_t q = cudaEventQuery(fences_[i]);
        if (q == cudaErrorNotReady) return false;
        BG_CUDA_CHECK(q);
        return true;
    }
    void busy_begin(BusyKind kind) override {
        BG_CHECK(events_used_ + 2 <= events_.size() && events_used_ % 2 == 0);
        pair_beside_[events_used_ / 2] = kind == BusyKind::kBesideHost;
        BG_CUDA_CHECK(cudaEventRecord(events_[events_used_++], stream_));
    }
    void busy_end() override {
        BG_CHECK(events_used_ % 2 == 1);
        BG_CUDA_CHECK(cudaEventRecord(events_[events_used_++], stream_));
    }
    // Up to the last sync, as before that sync was counted there.
    double busy_ms() const override {
        count_completed_pairs();
        return busy_ms_;
    }
    double busy_beside_host_ms() const override {
        count_completed_pairs();
        return busy_beside_host_ms_;
    }
    // Busy intervals in host time: an anchor event whose host time is known (recorded on an idle
    // stream and waited for), each event placed at anchor + elapsed.
    void begin_timeline() override {
        count_completed_pairs();
        BG_CHECK(events_used_ == 0 && timeline_);
        BG_CUDA_CHECK(cudaStreamSynchronize(stream_));
        BG_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
        BG_CUDA_CHECK(cudaEventSynchronize(anchor_));
        anchor_host_ms_ = now_ms();
        timeline_->clear();
    }
    const Timeline* timeline() const override {
        count_completed_pairs();
        return timeline_.get();
    }

    // The integer kernels for int8-typed weights in fast mode; the fused quantized kernels
    // wherever they take the weights; cuBLAS for the rest (F32 in place; F16 and the odd cases
    // dequantised into the scratch first).
    void matmul(const MatView& W, const float* x, int64_t ldx, int64_t n_tok, float* y, int64_t ldy) override {
        if (lim_.matmul.int8_takes(W.type, W.cols)) {
            BG_CHECK_MSG(i8ws_ && W.cols <= i8ws_->max_cols(), "cuda ops: an integer-path matrix wider than reserve() was told of");
            int8_matmul(*i8ws_, W, x, ldx, n_tok, y, ldy, stream_);
            return;
        }
        if (fused_matmul_takes(W.type, W.cols, reinterpret_cast<uintptr_t>(W.data))) {
            BG_CHECK_MSG(qws_ && W.cols <= qws_->max_cols(), "cuda ops: a fused matrix wider than reserve() was told of");
            quant_matmul(*qws_, W, x, ldx, n_tok, y, ldy, stream_);
            return;
        }
        BG_CHECK_MSG(mm_ != nullptr, "cuda ops: a matrix for cuBLAS that reserve() was not told of");
        BG_CHECK_MSG(sgemm_direct(W.type, reinterpret_cast<uintptr_t>(W.data)) ||
                         static_cast<uint64_t>(W.cols) * sizeof(float) <= mm_->scratch_bytes(),
                     "cuda ops: a matrix to dequantise that reserve() was not told of");
        cuda::matmul(*mm_, W, x, ldx, n_tok, y, ldy, stream_);
    }
    void matmul_many(const MatView* W, int n, const float* x, int64_t ldx, int64_t n_tok, float* const* y,
                     const int64_t* ldy) override {
        bool int8 = n >= 2 && n <= 16;
        for (int i = 0; i < n && int8; ++i)
            int8 = lim_.matmul.int8_takes(W[i].type, W[i].cols) && W[i].cols == W[0].cols;
        if (!int8) {
            Ops::matmul_many(W, n, x, ldx, n_tok, y, ldy);
            return;
        }
        BG_CHECK_MSG(i8ws_ && W[0].cols <= i8ws_->max_cols(), "cuda ops: an integer-path matrix wider than reserve() was told of");
        int8_matmul_many(*i8ws_, W, n, x, ldx, n_tok, y, ldy, stream_);
    }
    void matmul_grouped(const MatView& W, int64_t groups, const float* x, int64_t ldx, int64_t n_tok, float* y,
                        int64_t ldy) override {
        if (lim_.matmul.int8_takes(W.type, W.cols) && groups > 1) {
            BG_CHECK_MSG(i8ws_ && W.cols <= i8ws_->max_cols(), "cuda ops: an integer-path matrix wider than reserve() was told of");
            BG_CHECK(W.rows % groups == 0);
            int8_matmul_grouped(*i8ws_, W, groups, x, ldx, n_tok, y, ldy, stream_);
            return;
        }
        Ops::matmul_grouped(W, groups, x, ldx, n_tok, y, ldy);
    }
    // Whether the integer path takes this expert (its workspace sized for it by reserve()).
    bool int8_takes(const ExpertMats& e) const {
        const int64_t E = e.gate.cols, F = e.gate.rows;
        if (!lim_.matmul.int8_expert(e.gate.type, e.up.type, e.down.type, E, F)) return false;
        BG_CHECK_MSG(i8ws_ && F <= i8ws_->max_ff() && std::max(E, F) <= i8ws_->max_cols(),
                     "cuda ops: an integer-path expert wider than reserve() was told of");
        return true;
    }
    void expert_ffn(const ExpertMats& e, const float* x, int64_t ldx, const int32_t* rows, int64_t m, float limit,
                    SwigluClamp form, float* out, const int32_t* out_rows) override {
        const int64_t E = e.gate.cols, F = e.gate.rows;
        BG_CHECK(rows && out_rows && e.down.rows == E && e.down.cols == F);
        if (int8_takes(e)) {
            int8_expert_ffn(*i8ws_, e, x, ldx, rows, m, limit, form, out, E, out_rows, stream_);
            return;
        }
        if (MatmulNeeds::fused_expert(e.gate.type, e.up.type, e.down.type, E, F, reinterpret_cast<uintptr_t>(e.gate.data),
                                      reinterpret_cast<uintptr_t>(e.up.data), reinterpret_cast<uintptr_t>(e.down.data))) {
            BG_CHECK_MSG(qws_ && F <= qws_->max_ff() && std::max(E, F) <= qws_->max_cols(),
                         "cuda ops: an expert wider than reserve() was told of");
            cuda::expert_ffn(*qws_, e, x, ldx, rows, m, limit, form, out, E, out_rows, stream_);
            return;
        }
        // The CPU's sequence.
        // F may be part of the expert's hidden rows (ExpertMats::hidden_rows), never more.
        BG_CHECK_MSG(xg_ != nullptr && m <= lim_.expert_max_tok && E == lim_.n_embd && F <= lim_.n_ff,
                     "cuda ops: an unfused expert that reserve() was not told of");
        expert_ffn_by_ops(*this, e, x, ldx, rows, m, limit, form, out, out_rows, ExpertScratch{xg_, g_, up_, h_, eo_});
    }
    void expert_ffn_batch(const ExpertCall* calls, int64_t n, const float* x, int64_t ldx, float limit, SwigluClamp form,
                          float* out) override {
        // The integer path's experts together (int8_expert_ffn_batch), the others one at a time.
        ExpertCall int8_calls[kInt8ExpertBatchCalls];
        int64_t n_int8 = 0;
        for (int64_t i = 0; i < n; ++i) {
            const ExpertMats& e = calls[i].mats;
            if (n_int8 < kInt8ExpertBatchCalls && int8_takes(e)) {
                BG_CHECK(calls[i].rows && calls[i].out_rows && e.down.rows == e.gate.cols && e.down.cols == e.gate.rows);
                int8_calls[n_int8++] = calls[i];
            } else {
                expert_ffn(e, x, ldx, calls[i].rows, calls[i].m, limit, form, out, calls[i].out_rows);
            }
        }
        if (n_int8 > 0)
            int8_expert_ffn_batch(*i8ws_, int8_calls, n_int8, x, ldx, limit, form, out, int8_calls[0].mats.gate.cols,
                                  stream_);
    }
    void dequantize(GgmlType t, const uint8_t* src, float* dst, int64_t n) override {
        BG_CUDA_CHECK(cuda::dequantize(t, src, dst, n, stream_));
    }
    void dequantize_fp8_rows(const uint8_t* src, float* dst, int64_t rows, int64_t dim) override {
        BG_CUDA_CHECK(cuda::dequantize_fp8_rows(src, dst, rows, dim, stream_));
    }
    void embed_rows(const float* rows, const int32_t* row_ids, int64_t n_tok, int64_t width, float* H) override {
        DeviceMat m;
        m.data = reinterpret_cast<const uint8_t*>(rows);
        m.type = GgmlType::F32;
        m.cols = width;
        m.rows = n_tok;
        m.row_stride = width * sizeof(float);
        embed_tokens(m, row_ids, n_tok, H, stream_);
    }
    void fill_positions(int32_t* pos, int64_t n, int64_t start, int64_t step) override {
        cuda::fill_positions(pos, n, start, step, stream_);
    }
    void rmsnorm(const float* x, const float* w, int64_t n, int64_t n_rows, float eps, float* y) override {
        cuda::rmsnorm(x, w, n, n_rows, eps, y, stream_);
    }
    void rope(float* x, int64_t row_stride, int64_t n_tok, const int32_t* pos, int64_t n_heads, int64_t head_dim,
              const RopeParams& p, bool inverse) override {
        cuda::rope(x, row_stride, n_tok, pos, n_heads, head_dim, p, inverse, stream_);
    }
    void swiglu(const float* gate, const float* up, int64_t n, float limit, SwigluClamp form, float* out) override {
        cuda::swiglu(gate, up, n, limit, form, out, stream_);
    }
    void scale(float* x, int64_t n, float s) override {
        if (n <= 0) return;
        BG_CUDA_CHECK(launch_kernel(scale_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream_, x, n, s));
    }
    void hc_mix(const float* m, const float* base, const float* scale, int64_t n_tok, int n_iter, float eps,
                float* mix) override {
        cuda::hc_mix(m, base, scale, n_tok, n_iter, eps, mix, stream_);
    }
    void hc_collapse(const float* H, const float* pre, int64_t pre_stride, int64_t n_tok, int64_t n_embd, float* x) override {
        cuda::hc_collapse(H, pre, pre_stride, n_tok, n_embd, x, stream_);
    }
    void hc_expand(const float* mix, const float* y, const float* R, int64_t n_tok, int64_t n_embd, float* H) override {
        cuda::hc_expand(mix, y, R, n_tok, n_embd, H, stream_);
    }
    void engram_gate_add(const float* kv, const float* wk, const float* wq, int64_t n_tok, int64_t n_embd, float eps,
                         float* H) override {
        cuda::engram_gate_add(kv, wk, wq, n_tok, n_embd, eps, H, nullptr, stream_);
    }
    void compress_pool(const float* kv, const float* score, int64_t d, int64_t ratio, int64_t b0, int64_t n_blocks,
                       float* out) override {
        cuda::compress_pool(kv, score, d, ratio, b0, n_blocks, out, stream_);
    }
    void attention(const AttentionArgs& a) override {
        cuda::attention(a, stream_, 0, att_part_.data ? &att_part_ : nullptr);
    }
    void indexer(const IndexerArgs& a) override { cuda::indexer(a, stream_); }
    void route(RoutingPolicy policy, const float* logits, const float* bias, const uint8_t* resident, const uint8_t* hot,
               int64_t n_tok, int64_t n_expert, int k, RouteWeighting wt, int32_t* ids, float* weights) override {
        cuda::route(policy, logits, bias, resident, hot, n_tok, n_expert, k, wt, ids, weights, stream_);
    }
    void moe_gather(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t width, float* out) override {
        cuda::moe_gather(x, ldx, rows, m, width, out, stream_);
    }
    void group_by_expert(const int32_t* ids, int64_t n_slots, int64_t k, int64_t pos0, int64_t n_expert,
                         int32_t* counts, int32_t* gather, int32_t* scatter, int32_t* host_copy) override {
        // The device's address of the host copy (alloc_host memory: one of host_blocks_).
        int32_t* on_device = nullptr;
        if (host_copy) {
            on_device = static_cast<int32_t*>(mapped(host_copy, (n_expert + 1 + 2 * n_slots) * sizeof(int32_t)));
            BG_CHECK_MSG(on_device, "cuda ops: group_by_expert's host copy is not alloc_host memory of these ops");
        }
        cuda::group_by_expert(ids, n_slots, k, pos0, n_expert, counts, gather, scatter, on_device, stream_);
    }
    void moe_scatter_join(const float* src, const int32_t* rows, int64_t m, int64_t add0, int64_t n_add, int64_t width,
                          float* dst) override {
        cuda::moe_scatter_join(src, rows, m, add0, n_add, width, dst, stream_);
    }
    void argmax(const float* x, int64_t n, const TokenBan& ban, int32_t* out) override {
        cuda::argmax(x, n, ban, argmax_word_, out, stream_);
    }
    void moe_weighted_sum(const float* eo, const float* w, int64_t n_tok, int64_t k, int64_t width, float* y) override {
        cuda::moe_weighted_sum(eo, w, n_tok, k, width, y, stream_);
    }

private:
    // alloc_host memory: where it lies on the host and its device address.
    struct HostBlock {
        uint8_t* host;
        uint64_t bytes;
        uint8_t* device;
    };
    // The device address of [host, host + bytes) where the range is at most kKernelCopyMaxBytes
    // and lies in one alloc_host block; else null (other host memory, or a copy too long for a
    // kernel). A handful of blocks, searched in order: no allocation, no driver call.
    void* small_host_block(const void* host, uint64_t bytes) const {
        return bytes <= kKernelCopyMaxBytes ? mapped(host, bytes) : nullptr;
    }
    // The device address of [host, host + bytes) where it lies in one alloc_host block; else null.
    void* mapped(const void* host, uint64_t bytes) const {
        const auto p = reinterpret_cast<uintptr_t>(host);
        for (const HostBlock& b : host_blocks_) {
            const auto b0 = reinterpret_cast<uintptr_t>(b.host);
            if (p >= b0 && p - b0 <= b.bytes && bytes <= b.bytes - (p - b0)) return b.device + (p - b0);
        }
        return nullptr;
    }

    // Device memory of the ops' own, counted in own_bytes_ (max(1, n) floats: cudaMalloc of 0).
    float* own_floats(int64_t n) {
        const uint64_t bytes = std::max<uint64_t>(1, static_cast<uint64_t>(n)) * sizeof(float);
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess)
            fail("cuda ops: cannot allocate %llu bytes of device memory: %s", (unsigned long long)bytes, cudaGetErrorString(e));
        own_.push_back(p);
        own_bytes_ += bytes;
        return static_cast<float*>(p);
    }

    cudaStream_t stream_ = nullptr;
    OpsLimits lim_;
    std::unique_ptr<Int8Workspace> i8ws_;         // the integer kernels (null: none in this mode)
    std::unique_ptr<QuantMatmulWorkspace> qws_;  // the fused kernels (null: no fused matrix)
    std::unique_ptr<MatmulContext> mm_;          // cuBLAS (null: no matrix needs it)
    std::vector<void*> own_;
    uint64_t own_bytes_ = 0;
    std::vector<HostBlock> host_blocks_;  // alloc_host memory not yet freed
    float *xg_ = nullptr, *g_ = nullptr, *up_ = nullptr, *h_ = nullptr, *eo_ = nullptr;  // unfused experts
    AttentionPartials att_part_;  // decode attention's row split (none where lim has no heads)
    unsigned long long* argmax_word_ = nullptr;  // argmax's running best key, 0 between calls
    std::vector<void*> allocations_;
    cudaEvent_t fences_[kFences] = {};
    // Adds the pairs [0, events_completed_) to busy_ms_ and the timeline and moves the rest to
    // the front. Const for the getters: the count is lazy, its result the same.
    void count_completed_pairs() const {
        if (events_completed_ == 0) return;
        BG_CHECK(events_completed_ % 2 == 0 && events_completed_ <= events_used_);
        for (size_t i = 0; i < events_completed_; i += 2) {
            float ms = 0, at = 0;
            BG_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
            busy_ms_ += ms;
            if (pair_beside_[i / 2]) busy_beside_host_ms_ += ms;
            BG_CUDA_CHECK(cudaEventElapsedTime(&at, anchor_, events_[i]));
            timeline_->add(anchor_host_ms_ + at, anchor_host_ms_ + at + ms);
        }
        std::rotate(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(events_completed_),
                    events_.begin() + static_cast<std::ptrdiff_t>(events_used_));
        std::rotate(pair_beside_.begin(), pair_beside_.begin() + static_cast<std::ptrdiff_t>(events_completed_ / 2),
                    pair_beside_.begin() + static_cast<std::ptrdiff_t>((events_used_ + 1) / 2));
        events_used_ -= events_completed_;
        events_completed_ = 0;
    }
    // Busy pairs, created by reserve: [0, events_completed_) seen complete by a sync and not yet
    // counted, then those recorded since (events_used_ in all).
    mutable std::vector<cudaEvent_t> events_;
    mutable std::vector<uint8_t> pair_beside_;  // [pair]: the pair's bracket is BusyKind::kBesideHost
    mutable size_t events_used_ = 0, events_completed_ = 0;
    mutable double busy_ms_ = 0, busy_beside_host_ms_ = 0;
    cudaEvent_t anchor_ = nullptr;
    double anchor_host_ms_ = 0;
    std::unique_ptr<Timeline> timeline_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops() { return std::make_unique<CudaOps>(); }

cudaStream_t compute_stream(Ops& ops) {
    auto* c = dynamic_cast<CudaOps*>(&ops);
    BG_CHECK_MSG(c, "compute_stream: not the CUDA ops");
    return c->stream();
}

}  // namespace bg::cuda
