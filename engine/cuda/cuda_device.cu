#include "cuda/cuda_device.cuh"

#include "cuda/cuda_backend.cuh"
#include "cuda/forward_gpu.cuh"

namespace bg::cuda {

namespace {

class CudaDevice final : public DeviceFactory {
public:
    const char* name() const override { return "cuda"; }
    dsv41::DenseHome dense_home() const override { return dsv41::DenseHome::kDevice; }
    std::unique_ptr<Backend> make_backend() override { return make_cuda_backend(); }
    std::unique_ptr<dsv41::ForwardPass> make_forward(const dsv41::Model& m, cpu::ThreadPool&, ExpertProvider& experts,
                                                     EngramStore& engram, const dsv41::ForwardConfig& cfg) override {
        return std::make_unique<GpuForward>(m, experts, engram, cfg);
    }
};

}  // namespace

DeviceFactory& cuda_device() {
    static CudaDevice d;
    return d;
}

}  // namespace bg::cuda
