// The secure mode (Options::secure_secret): wraps the backend `make_inner` creates.
#pragma once

#include <memory>

#include "transport/secure/context.h"

namespace psrt::transport::secure {

std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options,
                                  const SecureTransport::MakeInner& make_inner);

}  // namespace psrt::transport::secure
