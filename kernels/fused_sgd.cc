// fused_sgd_cpu's front: names, ISA detection with the PSRT_CPU_ISA cap, validation of the
// SliceUpdate, and the hand-off to one ISA backend. The arithmetic lives in fused_sgd_*.cc.
#include "kernels/fused_sgd.h"

#include <fmt/core.h>

#include <cstdlib>
#include <string>

#include "kernels/fused_sgd_internal.h"
#include "psrt/error.h"

namespace psrt::kernels {

std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
  }
  return 0;
}

std::string_view to_string(DType t) noexcept {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown-dtype";
}

std::string_view to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown-isa";
}

namespace {

// The widest ISA the CPU has, probed once: the answer cannot change while the process runs.
CpuIsa detected_isa() noexcept {
  static const CpuIsa isa = [] {
#if PSRT_KERNELS_X86
    // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
      return CpuIsa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return CpuIsa::kAvx2;
#endif
    return CpuIsa::kScalar;
  }();
  return isa;
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// Everything a backend relies on, checked before anything is written.
void validate(const SliceUpdate& u, const SgdConfig& cfg, CpuIsa isa) {
  if (u.num_grads < 1) {
    invalid(
        fmt::format("fused_sgd_cpu: num_grads is {}; a slice update needs at least one "
                    "gradient",
                    u.num_grads));
  }
  if (u.weights == nullptr) invalid("fused_sgd_cpu: weights is null");
  if (u.momentum == nullptr && cfg.momentum != 0.f) {
    invalid(
        fmt::format("fused_sgd_cpu: momentum buffer is null but SgdConfig::momentum is {}; "
                    "pass a buffer of count floats or set momentum to 0",
                    cfg.momentum));
  }
  if (u.grads == nullptr) invalid("fused_sgd_cpu: grads is null");
  for (int j = 0; j < u.num_grads; ++j) {
    if (u.grads[j] == nullptr) {
      invalid(fmt::format("fused_sgd_cpu: grads[{}] of {} is null", j, u.num_grads));
    }
  }
  if (static_cast<int>(u.dtype) >= kNumDTypes) {
    invalid(fmt::format("fused_sgd_cpu: unknown gradient dtype {}", static_cast<int>(u.dtype)));
  }
  if (!cpu_has_isa(isa)) {
    invalid(fmt::format("fused_sgd_cpu: this CPU or build lacks {} (best available: {})",
                        to_string(isa), to_string(detected_isa())));
  }
}

}  // namespace

bool cpu_has_isa(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kScalar:
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512:
      return static_cast<int>(isa) <= static_cast<int>(detected_isa());
  }
  return false;
}

CpuIsa best_cpu_isa() {
  const CpuIsa detected = detected_isa();
  const char* env = std::getenv("PSRT_CPU_ISA");
  if (env == nullptr || *env == '\0') return detected;
  const std::string_view cap(env);
  for (CpuIsa isa : kAllCpuIsas) {
    if (cap == to_string(isa)) {
      return static_cast<int>(isa) < static_cast<int>(detected) ? isa : detected;
    }
  }
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("PSRT_CPU_ISA={} is not one of scalar|avx2|avx512 (unset it to use the "
                          "widest ISA this CPU has)",
                          cap));
}

void fused_sgd_cpu(const SliceUpdate& u, const SgdConfig& cfg, CpuIsa isa) {
  validate(u, cfg, isa);
  if (u.count == 0) return;
  switch (isa) {
    case CpuIsa::kScalar:
      detail::fused_sgd_scalar(u, cfg);
      return;
#if PSRT_KERNELS_X86
    case CpuIsa::kAvx2:
      detail::fused_sgd_avx2(u, cfg);
      return;
    case CpuIsa::kAvx512:
      detail::fused_sgd_avx512(u, cfg);
      return;
#else
    default:
      return;  // unreachable: validate() rejects ISAs this build lacks
#endif
  }
}

}  // namespace psrt::kernels
