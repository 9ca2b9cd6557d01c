#include "transport/secure/factory.h"

namespace psrt::transport::secure {

std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options,
                                  const SecureTransport::MakeInner& make_inner) {
  return std::make_unique<SecureTransport>(std::move(receiver), std::move(options), make_inner);
}

}  // namespace psrt::transport::secure
