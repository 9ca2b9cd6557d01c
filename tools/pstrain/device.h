// Where pstrain computes (--device): the flag parsed like psrun's --server-device, then checked
// against what this LibTorch and this machine offer — before the job is joined, so that a worker
// that cannot use its device fails at once instead of leaving the others waiting.
#pragma once
#include <torch/torch.h>

#include <string>

namespace psrt::pstrain {

// "cpu", "cuda" (this worker's GPU: rank_gpu) or "cuda:N" as a LibTorch device. Throws psrt::Error:
// kInvalidArgument for a malformed flag (naming the accepted forms), kUnsupported naming the
// cause when CUDA device N cannot be used (a CPU-only LibTorch, no visible GPU, N too large).
::torch::Device resolve_device(const std::string& flag);

// The GPU `--device cuda` (no index) means for this worker among `count` visible devices: psrun's
// placement (PSRT_GPU) when set, else the worker-local rank (PSRT_LOCAL_RANK) modulo `count`,
// else 0. `psrt_gpu` / `local_rank` are those variables' values (null when unset). Throws
// psrt::Error (kInvalidArgument) naming the variable when it is not a number or PSRT_GPU names
// a device this process cannot see: never a silent cuda:0.
int rank_gpu(int count, const char* psrt_gpu, const char* local_rank);

// Whether this LibTorch was built with CUDA (its CUDA library is linked in), GPU present or not.
// Debian's libtorch-dev is CPU-only.
bool libtorch_has_cuda();

}  // namespace psrt::pstrain
