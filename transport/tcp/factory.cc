#include "transport/tcp/factory.h"

#include "transport/context_handle.h"
#include "transport/tcp/context.h"

namespace psrt::transport::tcp {

std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options) {
  auto ctx = std::make_shared<TcpContext>(std::move(receiver), std::move(options));
  ctx->start();
  return std::make_unique<ContextHandle<TcpContext>>(std::move(ctx));
}

}  // namespace psrt::transport::tcp
