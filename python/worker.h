// psrt.Worker: psrt::Worker for Python, same names and contracts (include/psrt/psrt.h).
#pragma once
#include <pybind11/pybind11.h>

namespace psrt::python {

void bind_worker(pybind11::module_& m);

}  // namespace psrt::python
