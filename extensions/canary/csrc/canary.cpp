// Torch glue of the epforge canary: checks tensors, launches the kernels on the current stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

cudaError_t canary_add_launch(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
cudaError_t canary_arch_launch(int* out, cudaStream_t stream);

namespace {

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

torch::Tensor add(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "canary.add: both tensors must be on a CUDA device");
  TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
              "canary.add: float32 tensors only");
  TORCH_CHECK(a.sizes() == b.sizes(), "canary.add: shapes differ: ", a.sizes(), " vs ", b.sizes());
  const c10::cuda::CUDAGuard guard(a.device());
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto out = torch::empty_like(ac);
  check_cuda(canary_add_launch(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), ac.numel(),
                               c10::cuda::getCurrentCUDAStream().stream()),
             "add_kernel launch");
  return out;
}

int64_t compiled_arch(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto out = torch::empty({1}, torch::TensorOptions().dtype(torch::kInt32).device(torch::kCUDA, device));
  check_cuda(canary_arch_launch(out.data_ptr<int>(), c10::cuda::getCurrentCUDAStream().stream()),
             "arch_kernel launch");
  return out.item<int>();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "epforge canary CUDA extension";
  m.def("add", &add, "Element-wise a + b of two float32 CUDA tensors (a CUDA kernel)");
  m.def("compiled_arch", &compiled_arch, "__CUDA_ARCH__ of the code that ran on the device (e.g. 1200)",
        pybind11::arg("device") = 0);
}
