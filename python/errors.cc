#include "python/errors.h"

#include "psrt/error.h"

namespace py = pybind11;

namespace psrt::python {

void bind_errors(py::module_& m) {
  py::enum_<ErrorCode> codes(m, "ErrorCode", py::arithmetic(),
                             "psrt::ErrorCode: why an operation failed (psrt.Error.code)");
#define PSRT_ERROR_CODE_VALUE(code, python_name, text, meaning) \
  codes.value(#python_name, ErrorCode::code, meaning);
  PSRT_ERROR_CODES(PSRT_ERROR_CODE_VALUE)
#undef PSRT_ERROR_CODE_VALUE

  // Created once and never freed: the translator below may run until the interpreter exits.
  static auto* error_type = new py::exception<Error>(m, "Error");
  error_type->doc() =
      "An operation of psrt failed. str(e) names the server, key and cause as the C++ "
      "psrt::Error does; e.code is the psrt.ErrorCode.";
  error_type->attr("code") = ErrorCode::kInternal;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = py::reinterpret_borrow<py::object>(error_type->ptr())(e.what());
      exc.attr("code") = e.code();
      PyErr_SetObject(error_type->ptr(), exc.ptr());
    }
  });
}

}  // namespace psrt::python
