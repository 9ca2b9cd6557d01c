// The wire codec whose C++ type comes from kernels/: payload dtypes. Split from ps/protocol.h so
// that the wire-format header names no type of a lower layer. (The SET_OPTIMIZER record's type,
// psrt::OptimizerConfig, is public: its codec is in ps/protocol.h.)
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

}  // namespace psrt::ps
