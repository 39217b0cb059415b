// Raw CUPTI kernel durations, the yardstick for kcoral.builtins.benchmark.
//
//   raw_cupti <elements> <kernels per call> <calls>
//
// Launches the same add_one kernel that benchmarks/gpu/gpu_checks.py times through KCoral
// (same source, same launch shape), zeroing twice the L2 before each call as benchmark()
// does, and prints one JSON line: the median and minimum kernel duration, and the median
// span of each call's kernels (first start to last end), all in milliseconds, straight from
// CUPTI's activity records. Built with nvcc; no KCoral code involved.
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

__global__ void add_one_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

namespace {

struct Span {
  unsigned long long start, end;
};
std::mutex mutex;
std::vector<Span> kernels;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 16u << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      auto* kernel = reinterpret_cast<CUpti_ActivityKernel10*>(record);
      kernels.push_back({kernel->start, kernel->end});
    }
  }
  free(buffer);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 256;
  int per_call = argc > 2 ? std::atoi(argv[2]) : 1;
  int calls = argc > 3 ? std::atoi(argv[3]) : 2000;
  float *x = nullptr, *y = nullptr;
  char* flush = nullptr;
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
  cudaMalloc(&x, sizeof(float) * n);
  cudaMalloc(&y, sizeof(float) * n);
  cudaMalloc(&flush, 2 * static_cast<size_t>(l2));
  cudaMemset(x, 0, sizeof(float) * n);
  // Warm up the way benchmark() does, long enough for the SM clock to rise from idle.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
       std::chrono::steady_clock::now() < until;) {
    cudaMemset(flush, 0, 2 * static_cast<size_t>(l2));
    cudaDeviceSynchronize();
    for (int k = 0; k < per_call; ++k) add_one_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
    cudaDeviceSynchronize();
  }

  cuptiActivityRegisterCallbacks(requested, completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  for (int call = 0; call < calls; ++call) {
    cudaMemset(flush, 0, 2 * static_cast<size_t>(l2));
    cudaDeviceSynchronize();
    for (int k = 0; k < per_call; ++k) add_one_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
    cudaDeviceSynchronize();
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);

  std::vector<double> durations, spans;
  std::sort(kernels.begin(), kernels.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  for (const Span& kernel : kernels) durations.push_back((kernel.end - kernel.start) / 1e6);
  for (std::size_t i = 0; i + per_call <= kernels.size(); i += per_call)
    spans.push_back((kernels[i + per_call - 1].end - kernels[i].start) / 1e6);
  double minimum = durations.empty() ? 0 : *std::min_element(durations.begin(), durations.end());
  std::printf("{\"elements\": %d, \"kernels_per_call\": %d, \"kernels\": %zu, \"kernel_ms_median\": %.6f, "
              "\"kernel_ms_min\": %.6f, \"call_span_ms_median\": %.6f}\n",
              n, per_call, kernels.size(), median(durations), minimum, median(spans));
  return kernels.size() == static_cast<std::size_t>(calls * per_call) ? 0 : 1;
}
