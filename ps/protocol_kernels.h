// The wire codecs whose C++ types come from kernels/: payload dtypes and the SET_OPTIMIZER
// record. Split from ps/protocol.h so that the wire-format header names no type of a lower layer
// (ps/protocol.h describes the layout: kOptimizerRecordBytes and the flag bits live there).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "kernels/fused_sgd.h"
#include "ps/protocol.h"
#include "psrt/error.h"

namespace psrt::ps {

kernels::DType to_dtype(WireType t);  // data types only
WireType to_wire(kernels::DType t) noexcept;

// kSetOptimizer payload (kOptimizerRecordBytes, layout in ps/protocol.h).
std::vector<std::byte> encode_optimizer(const kernels::SgdConfig& c);
Status decode_optimizer(std::span<const std::byte> bytes, kernels::SgdConfig& out);

}  // namespace psrt::ps
