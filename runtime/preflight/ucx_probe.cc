#include "runtime/preflight/ucx_probe.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "psrt/config.h"

#if PSRT_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace psrt::preflight {
namespace {

#if PSRT_HAVE_UCX
// The transport names of the "resource" lines ucp_context_print_info writes, in order, once each
// ("#   resource 2  :  md 1  dev 1  flags -- tcp/eth0" gives "tcp").
std::vector<std::string> transports_of(ucp_context_h ctx) {
  std::vector<std::string> out;
  char* text = nullptr;
  std::size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (!f) return out;
  ucp_context_print_info(ctx, f);
  std::fclose(f);
  std::istringstream in(std::string(text, size));
  std::free(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("resource") == std::string::npos) continue;
    const auto dashes = line.find("-- ");
    if (dashes == std::string::npos) continue;
    std::string tl = line.substr(dashes + 3);
    tl = tl.substr(0, tl.find('/'));
    if (tl.empty()) continue;
    bool seen = false;
    for (const auto& t : out)
      seen = seen || t == tl;
    if (!seen) out.push_back(tl);
  }
  return out;
}
#endif

}  // namespace

UcxFacts probe_ucx() {
  UcxFacts out;
  if (const char* tls = std::getenv("UCX_TLS")) out.tls = tls;
#if PSRT_HAVE_UCX
  out.built = true;
  out.version = ucp_get_version_string();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    out.error = std::string("ucp_config_read: ") + ucs_status_string(st);
    return out;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;  // what transport/ucx asks for
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  if (st != UCS_OK) {
    out.error = std::string("ucp_init: ") + ucs_status_string(st);
    return out;
  }
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(ctx, &attr) == UCS_OK)
    out.cuda_memory = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  out.transports = transports_of(ctx);
  ucp_cleanup(ctx);
#endif
  return out;
}

}  // namespace psrt::preflight
