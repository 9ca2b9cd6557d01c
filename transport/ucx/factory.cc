#include "transport/ucx/factory.h"

#include "transport/context_handle.h"
#include "transport/ucx/context.h"

namespace psrt::transport::ucx {

std::unique_ptr<Transport> create(std::shared_ptr<Receiver> receiver, Options options) {
  auto ctx = std::make_shared<UcxContext>(std::move(receiver), std::move(options));
  ctx->start();
  return std::make_unique<ContextHandle<UcxContext>>(std::move(ctx));
}

}  // namespace psrt::transport::ucx
