#include "transport/factory.h"

#include "psrt/config.h"
#include "transport/secure/factory.h"
#include "transport/tcp/factory.h"
#if PSRT_HAVE_UCX
#include "transport/ucx/factory.h"
#endif

namespace psrt::transport {

std::vector<std::string> available_backends() {
#if PSRT_HAVE_UCX
  return {"ucx", "tcp"};
#else
  return {"tcp"};
#endif
}

std::unique_ptr<Transport> create_transport(std::string_view name,
                                            std::shared_ptr<Receiver> receiver, Options options) {
  if (!options.secure_secret.empty()) {
    return secure::create(std::move(receiver), std::move(options),
                          [name = std::string(name)](std::shared_ptr<Receiver> rx, Options o) {
                            return create_transport(name, std::move(rx), std::move(o));
                          });
  }
  if (name == "tcp") return tcp::create(std::move(receiver), options);
#if PSRT_HAVE_UCX
  if (name == "ucx") return ucx::create(std::move(receiver), options);
#else
  if (name == "ucx") {
    throw Error(ErrorCode::kUnsupported,
                "this psrt was built without UCX: install libucx-dev and rebuild, or use "
                "--transport tcp");
  }
#endif
  std::string known;
  for (const auto& b : available_backends())
    known += (known.empty() ? "" : ", ") + b;
  throw Error(ErrorCode::kInvalidArgument,
              "unknown transport '" + std::string(name) + "' (available: " + known + ")");
}

}  // namespace psrt::transport
