// psrt.Error and psrt.ErrorCode: psrt::Error raised in Python with .code = its psrt::ErrorCode.
#pragma once
#include <pybind11/pybind11.h>

namespace psrt::python {

// Adds ErrorCode and Error to `m` and translates psrt::Error into psrt.Error from then on.
void bind_errors(pybind11::module_& m);

}  // namespace psrt::python
