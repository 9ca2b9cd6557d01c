// A Python object's memory as psrt sees it, used in place and never copied: a torch.Tensor
// (through data_ptr(); CPU, or CUDA where the build has CUDA) or any object with the buffer
// protocol (a NumPy array, a bytearray of floats, ...). Anything else, a non-contiguous view or
// a wrong dtype is refused with psrt::Error (kInvalidArgument) naming the argument and the fix.
#pragma once
#include <pybind11/pybind11.h>

#include <cstddef>

#include "psrt/buffer.h"
#include "psrt/psrt.h"

namespace psrt::python {

struct Memory {
  MutableBuffer buffer;  // the object's bytes (never written through for a gradient)
  GradType type = GradType::kF32;
  std::size_t count = 0;   // elements
  pybind11::object owner;  // the object itself: kept alive while an operation uses it
};

enum class Use {
  kWeights,   // fp32, written (pull's and push_pull's `out`)
  kValue,     // fp32, read (init's value)
  kGradient,  // fp32, fp16 or bf16, read
};

// `what` names the argument in errors ("push_pull(key 7): grad").
Memory memory_of(pybind11::handle obj, Use use, const std::string& what);

}  // namespace psrt::python
