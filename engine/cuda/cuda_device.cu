#include "cuda/cuda_device.cuh"

#include "cuda/cuda_backend.cuh"
#include "cuda/cuda_ops.cuh"

namespace bg::cuda {

namespace {

class CudaDevice final : public DeviceFactory {
public:
    const char* name() const override { return "cuda"; }
    bool dense_on_device() const override { return true; }
    std::unique_ptr<Backend> make_backend(const BackendOptions& opts) override {
        return make_cuda_backend(0, opts.sm_limit, opts.chained_launches);
    }
    std::unique_ptr<Ops> make_ops(cpu::ThreadPool&) override { return make_cuda_ops(); }
};

}  // namespace

DeviceFactory& cuda_device() {
    static CudaDevice d;
    return d;
}

}  // namespace bg::cuda
