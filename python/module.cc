// The extension psrt._core: the worker API of include/psrt/psrt.h for Python. python/psrt/
// re-exports it as `import psrt`.
#include <pybind11/pybind11.h>

#include <string>

#include "base/fnv.h"
#include "python/errors.h"
#include "python/handle.h"
#include "python/worker.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "psrt worker API (include/psrt/psrt.h) for Python";
  psrt::python::bind_errors(m);
  psrt::python::bind_handle(m);
  psrt::python::bind_worker(m);
  m.def(
      "key_of", [](const std::string& name) { return psrt::fnv1a(name.data(), name.size()); },
      py::arg("name"),
      "The key a parameter name maps to (FNV-1a 64 of its UTF-8 bytes), as psrt::torch::key_of.");
}
