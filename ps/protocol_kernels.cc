#include "ps/protocol_kernels.h"

#include <fmt/core.h>

#include <bit>
#include <cstdint>
#include <string>
#include <utility>

#include "transport/wire.h"

namespace psrt::ps {
namespace {

using wire::load;
using wire::store;

Status bad(std::string message) { return protocol_error(std::move(message)); }

}  // namespace

kernels::DType to_dtype(WireType t) {
  switch (t) {
    case WireType::kF32:
      return kernels::DType::kF32;
    case WireType::kF16:
      return kernels::DType::kF16;
    case WireType::kBF16:
      return kernels::DType::kBF16;
    case WireType::kBytes:
      break;
  }
  throw Error(ErrorCode::kInternal, "to_dtype of a byte payload");
}

WireType to_wire(kernels::DType t) noexcept {
  switch (t) {
    case kernels::DType::kF32:
      return WireType::kF32;
    case kernels::DType::kF16:
      return WireType::kF16;
    case kernels::DType::kBF16:
      return WireType::kBF16;
  }
  return WireType::kBytes;
}

std::vector<std::byte> encode_optimizer(const kernels::SgdConfig& c) {
  std::vector<std::byte> out(kOptimizerRecordBytes);
  store<std::uint32_t>(&out[0], std::bit_cast<std::uint32_t>(c.lr));
  store<std::uint32_t>(&out[4], std::bit_cast<std::uint32_t>(c.momentum));
  store<std::uint32_t>(&out[8], std::bit_cast<std::uint32_t>(c.dampening));
  store<std::uint32_t>(&out[12], std::bit_cast<std::uint32_t>(c.weight_decay));
  store<std::uint32_t>(&out[16], (c.nesterov ? kOptimizerNesterov : 0u) |
                                     (c.skip_nonfinite ? kOptimizerSkipNonfinite : 0u));
  store<std::uint32_t>(&out[20], std::bit_cast<std::uint32_t>(c.max_grad_norm));
  return out;
}

Status decode_optimizer(std::span<const std::byte> bytes, kernels::SgdConfig& out) {
  if (bytes.size() != kOptimizerRecordBytes)
    return bad(fmt::format("optimizer record of {} bytes", bytes.size()));
  kernels::SgdConfig c;
  c.lr = std::bit_cast<float>(load<std::uint32_t>(&bytes[0]));
  c.momentum = std::bit_cast<float>(load<std::uint32_t>(&bytes[4]));
  c.dampening = std::bit_cast<float>(load<std::uint32_t>(&bytes[8]));
  c.weight_decay = std::bit_cast<float>(load<std::uint32_t>(&bytes[12]));
  const auto flags = load<std::uint32_t>(&bytes[16]);
  c.max_grad_norm = std::bit_cast<float>(load<std::uint32_t>(&bytes[20]));
  if ((flags & ~(kOptimizerNesterov | kOptimizerSkipNonfinite)) != 0)
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("optimizer flags {:#x} hold unknown bits (known: nesterov {:#x}, "
                              "skip_nonfinite {:#x})",
                              flags, kOptimizerNesterov, kOptimizerSkipNonfinite));
  // Same bounds torch.optim.SGD (and clip_grad_norm_) enforce, plus finiteness.
  auto finite_nonneg = [](float x) { return x >= 0.f && x <= 3.4e38f; };
  if (!finite_nonneg(c.lr) || !finite_nonneg(c.momentum) || !finite_nonneg(c.weight_decay) ||
      !(c.dampening >= 0.f && c.dampening <= 1.f) || !finite_nonneg(c.max_grad_norm))
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("optimizer lr={} momentum={} dampening={} weight_decay={} "
                              "max_grad_norm={}: values must be finite and >= 0 (dampening in "
                              "[0, 1])",
                              c.lr, c.momentum, c.dampening, c.weight_decay, c.max_grad_norm));
  c.nesterov = (flags & kOptimizerNesterov) != 0;
  c.skip_nonfinite = (flags & kOptimizerSkipNonfinite) != 0;
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    return Status(ErrorCode::kInvalidArgument,
                  "Nesterov momentum requires a momentum > 0 and zero dampening");
  out = c;
  return {};
}

}  // namespace psrt::ps
