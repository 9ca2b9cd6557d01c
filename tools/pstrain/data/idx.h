// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/).
#pragma once

#include <torch/types.h>

#include <string>

namespace psrt::pstrain {

// Reads an IDX file of unsigned bytes, gzip-compressed (detected by the 0x1f 0x8b magic) or raw.
// Returns a uint8 tensor with the dims of the header (idx1: [N]; idx3: [N, rows, cols]).
//
// Throws psrt::Error whose message names `path`: kNotFound when the file cannot be opened;
// kInvalidArgument for a bad magic (must be 0x00 0x00 0x08 <ndims 1..4>; the message shows the
// bytes found), a payload shorter than the dims say (expected vs found bytes), trailing bytes
// after the payload, or a corrupt gzip stream.
::torch::Tensor read_idx(const std::string& path);

}  // namespace psrt::pstrain
