/*
 * The CUDA caching allocator's peak memory, for arl-train's metrics
 * (`peak_gpu_allocated_bytes`, `peak_gpu_reserved_bytes`): what
 * torch.cuda.max_memory_allocated / max_memory_reserved report. torch-sys
 * exposes no allocator statistics; c10's device-generic allocator interface
 * does, without CUDA's own headers. Compiled by build.rs.
 *
 * No C++ exception crosses into Rust: every call catches and returns -1.
 */
#include <c10/core/CachingDeviceAllocator.h>

extern "C" {

/* Peak bytes allocated (held by tensors) and reserved (held by the cache)
 * on CUDA device `index` since the process started.
 * 0 on success. */
int arl_cuda_memory_peak(int index, int64_t *allocated_peak, int64_t *reserved_peak) {
  try {
    auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(static_cast<c10::DeviceIndex>(index));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated_peak = stats.allocated_bytes[all].peak;
    *reserved_peak = stats.reserved_bytes[all].peak;
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
