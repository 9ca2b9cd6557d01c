// Picks a transport backend by name at run time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.h"

namespace psrt::transport {

// Backends compiled into this build, in order of preference ("ucx" first when built).
std::vector<std::string> available_backends();

// Creates and starts the backend called `name` ("tcp" or "ucx"). Throws psrt::Error naming the
// backends that exist when `name` is unknown or not built in.
std::unique_ptr<Transport> create_transport(std::string_view name,
                                            std::shared_ptr<Receiver> receiver,
                                            Options options = {});

}  // namespace psrt::transport
