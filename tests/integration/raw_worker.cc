#include "tests/integration/raw_worker.h"

#include <cstdio>
#include <cstdlib>

#include "ps/session/protocol.h"
#include "transport/factory.h"

namespace psrt::test {

using namespace std::chrono_literals;

JobEnv job_env() {
  return {std::getenv("PSRT_TRANSPORT"), std::getenv("PSRT_SECRET"), std::getenv("PSRT_SCHEDULER")};
}

RawWorker connect_raw_worker(const std::string& backend, const std::string& secret,
                             ps::Handler& handler, const std::string& address, std::uint32_t rank) {
  RawWorker w;
  w.endpoint = std::make_shared<ps::Endpoint>(secret, ps::Role::kWorker, ps::Limits{});
  w.endpoint->set_handler(&handler);
  w.transport = transport::create_transport(backend, w.endpoint, job_transport_options(secret));
  w.scheduler = w.endpoint->connect(*w.transport, address, rank, ps::Role::kScheduler, 0, 10s);
  return w;
}

ps::Reply register_raw_worker(RawWorker& w, ps::Requests& requests) {
  ps::Header reg;
  reg.type = ps::MsgType::kRegister;
  reg.set_role(ps::Role::kWorker);
  reg.set_rank(0);
  auto reply = requests.call(*w.scheduler, reg, {}, "REGISTER", 60s);
  w.endpoint->set_credential(ps::credential_of(reply.header));
  return reply;
}

void expect_or_exit(bool ok, const std::string& what, const char* label, bool flush) {
  if (ok) {
    std::printf("OK %s\n", what.c_str());
    if (flush) std::fflush(stdout);
    return;
  }
  std::fprintf(stderr, "FAIL %s: %s\n", label, what.c_str());
  std::exit(1);
}

}  // namespace psrt::test
