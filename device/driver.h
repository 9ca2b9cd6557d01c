// Driver API functions fetched through the CUDA runtime (cudaGetDriverEntryPointByVersion), so
// that psrt never links libcuda: it is absent on machines without a driver, where every psrt
// binary must still start. CUDA builds only; internal to device/.
#pragma once

namespace psrt::device::detail {

// The driver function `name` as of the CUDA 12.0 ABI; throws psrt::Error(kUnsupported) when the
// driver lacks it. Cached per name by the caller (a function-local static).
void* driver_function(const char* name);

}  // namespace psrt::device::detail
