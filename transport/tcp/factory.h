#pragma once

#include <memory>

#include "transport/transport.h"

namespace psrt::transport::tcp {

// Creates a started tcp transport. Every connection delivers to `receiver`.
std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options);

}  // namespace psrt::transport::tcp
