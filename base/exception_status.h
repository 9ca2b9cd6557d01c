// The status for an exception caught where code expected only psrt::Error: a progress thread
// must never let one escape (the process would terminate), so the catch-all handlers there turn
// it into an error that names it and close what it concerned.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "psrt/error.h"

namespace psrt {

// Call inside a catch block: the exception being handled, as a status. std::bad_alloc is named
// as running out of memory (often an address-space limit, ulimit -v); psrt::Error keeps its code.
inline Status current_exception_status(const std::string& where) {
  try {
    throw;
  } catch (const Error& e) {
    return Status(e.code(), where + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kSystem,
                  where +
                      ": out of memory (an allocation failed; check the process's memory "
                      "limits, e.g. ulimit -v)");
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, where + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status(ErrorCode::kInternal, where + ": unexpected exception of unknown type");
  }
}

}  // namespace psrt
