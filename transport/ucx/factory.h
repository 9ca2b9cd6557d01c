#pragma once

#include <memory>

#include "transport/transport.h"

namespace psrt::transport::ucx {

// Creates a started UCX transport. Every connection delivers to `receiver`.
std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options);

}  // namespace psrt::transport::ucx
