#include "runtime/job_secret.h"

#include <cstdlib>

#include "ps/session/auth.h"
#include "psrt/error.h"

namespace psrt::runtime {

std::string job_secret(NoSecret none, const std::string& file) {
  if (!file.empty()) return ps::read_secret_file(file);
  if (const char* s = std::getenv("PSRT_SECRET"); s && *s) {
    ps::check_secret_length(s, "PSRT_SECRET");
    return s;
  }
  if (const char* f = std::getenv("PSRT_SECRET_FILE"); f && *f) return ps::read_secret_file(f);
  if (none == NoSecret::kGenerate) return ps::generate_secret();
  throw Error(ErrorCode::kInvalidArgument,
              "neither PSRT_SECRET nor PSRT_SECRET_FILE is set: start this program with psrun, or "
              "give every process of the job the same secret in PSRT_SECRET_FILE (a file only its "
              "owner can read, chmod 600)");
}

}  // namespace psrt::runtime
