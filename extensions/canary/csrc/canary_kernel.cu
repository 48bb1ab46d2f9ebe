// Device code of the epforge canary. Deliberately free of torch headers: nvcc compiles it in seconds per arch,
// so an arch-list change costs little; the torch glue lives in canary.cpp.
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a[i] + b[i];
  }
}

// Writes the __CUDA_ARCH__ the running SASS/PTX was compiled for (e.g. 1200 for sm_120).
__global__ void arch_kernel(int* out) {
#ifdef __CUDA_ARCH__
  *out = __CUDA_ARCH__;
#else
  *out = -1;
#endif
}

}  // namespace

cudaError_t canary_add_launch(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) {
    return cudaSuccess;
  }
  const int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 4096 ? wanted : 4096);
  add_kernel<<<blocks, threads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t canary_arch_launch(int* out, cudaStream_t stream) {
  arch_kernel<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}
