#include "python/buffers.h"

#include <fmt/format.h>

#include <string>

#include "psrt/error.h"

namespace py = pybind11;

namespace psrt::python {
namespace {

std::string wanted(Use use) {
  return use == Use::kGradient ? "float32, float16 or bfloat16" : "float32";
}

Error refuse(const std::string& what, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument, fmt::format("{} {}", what, why));
}

// torch's dtype objects, looked up once (torch is imported by then: a tensor was passed).
struct TorchDtypes {
  py::object f32, f16, bf16;
};
const TorchDtypes& torch_dtypes() {
  static const auto* d = [] {
    py::module_ torch = py::module_::import("torch");
    return new TorchDtypes{torch.attr("float32"), torch.attr("float16"), torch.attr("bfloat16")};
  }();
  return *d;
}

// torch.Tensor, seen through its Python attributes: the module does not link LibTorch, so it
// works with whatever torch the interpreter imports.
Memory tensor_memory(py::handle t, Use use, const std::string& what) {
  Memory m;
  const TorchDtypes& d = torch_dtypes();
  const py::object dtype = t.attr("dtype");
  if (dtype.is(d.f32)) {
    m.type = GradType::kF32;
  } else if (use == Use::kGradient && dtype.is(d.f16)) {
    m.type = GradType::kF16;
  } else if (use == Use::kGradient && dtype.is(d.bf16)) {
    m.type = GradType::kBF16;
  } else {
    throw refuse(what, fmt::format("is a {} tensor; psrt takes {} here (psrt never converts: "
                                   "pass t.to(torch.float32) yourself)",
                                   py::str(dtype).cast<std::string>(), wanted(use)));
  }
  if (!t.attr("is_contiguous")().cast<bool>())
    throw refuse(what,
                 "is not contiguous; psrt sends from and receives into the tensor's own "
                 "memory and never copies it: pass t.contiguous() and keep using that tensor");
  if (t.attr("is_cuda").cast<bool>()) {
    m.buffer.memory = MemoryType::kCuda;
  } else if (!t.attr("is_cpu").cast<bool>()) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} is on {}: psrt moves CPU and CUDA tensors", what,
                            py::str(t.attr("device")).cast<std::string>()));
  }
  if (use == Use::kValue && m.buffer.memory == MemoryType::kCuda)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{} is a CUDA tensor: init() reads host memory (pass t.cpu())", what));
  m.count = t.attr("numel")().cast<std::size_t>();
  m.buffer.size = m.count * t.attr("element_size")().cast<std::size_t>();
  m.buffer.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
  m.owner = py::reinterpret_borrow<py::object>(t);
  return m;
}

bool c_contiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

Memory buffer_memory(py::handle obj, Use use, const std::string& what) {
  const bool writable = use == Use::kWeights;
  py::buffer_info info;
  try {
    info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (const py::error_already_set& e) {
    throw refuse(what, fmt::format("cannot be used in place{}: {}",
                                   writable ? " (psrt writes the weights into it)" : "", e.what()));
  }
  Memory m;
  std::string format = info.format;
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@'))
    format.erase(0, 1);
  if (format == "f" && info.itemsize == 4) {
    m.type = GradType::kF32;
  } else if (use == Use::kGradient && format == "e" && info.itemsize == 2) {
    m.type = GradType::kF16;
  } else {
    throw refuse(what, fmt::format("holds elements of format '{}' ({} bytes); psrt takes {} here "
                                   "(psrt never converts: pass arr.astype(numpy.float32) yourself)",
                                   info.format, info.itemsize, wanted(use)));
  }
  if (!c_contiguous(info))
    throw refuse(what,
                 "is not C-contiguous; psrt sends from and receives into the array's own "
                 "memory and never copies it: pass numpy.ascontiguousarray(a) and keep "
                 "using that array");
  m.count = static_cast<std::size_t>(info.size);
  m.buffer.size = m.count * static_cast<std::size_t>(info.itemsize);
  m.buffer.data = info.ptr;
  m.owner = py::reinterpret_borrow<py::object>(obj);
  return m;
}

}  // namespace

Memory memory_of(py::handle obj, Use use, const std::string& what) {
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous") &&
      py::hasattr(obj, "dtype"))
    return tensor_memory(obj, use, what);
  if (PyObject_CheckBuffer(obj.ptr())) return buffer_memory(obj, use, what);
  throw refuse(what,
               fmt::format("is a {}: psrt takes a torch.Tensor or an object with the buffer "
                           "protocol (a NumPy array)",
                           py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>()));
}

}  // namespace psrt::python
