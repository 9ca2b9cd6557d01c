#include "psrt/error.h"

namespace psrt {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
#define PSRT_ERROR_CODE_CASE(code, python_name, text, meaning) \
  case ErrorCode::code:                                        \
    return text;
    PSRT_ERROR_CODES(PSRT_ERROR_CODE_CASE)
#undef PSRT_ERROR_CODE_CASE
  }
  return "unknown";
}

}  // namespace psrt
