#include "runtime/launch/launcher.h"

#include <string>

#include "psrt/error.h"
#include "runtime/launch/local_launcher.h"

namespace psrt::runtime {

std::unique_ptr<LaunchBackend> make_launch_backend(std::string_view name) {
  if (name == "local") return std::make_unique<LocalLauncher>();
  throw Error(ErrorCode::kInvalidArgument,
              "unknown launch backend '" + std::string(name) +
                  "'; known backends: local (ssh needs hosts: psrun --launcher ssh -H ...)");
}

}  // namespace psrt::runtime
