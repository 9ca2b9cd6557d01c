// The secure mode's drop count as a metric (issue 30): forged frames injected by a man in the
// middle on a real --secure tcp connection are dropped and counted, and the count reaches the
// job's Prometheus exposition exactly, as psrt_secure_dropped_messages_total of the process
// (server or worker, from its METRICS report) and of the scheduler (from its own transport).
// Before, the count was only logged.
#include <gtest/gtest.h>

#include <string>

#include "ps/job_metrics.h"
#include "ps/metrics.h"
#include "runtime/metrics_http.h"
#include "tests/transport/harness.h"
#include "tests/transport/mitm_relay.h"

namespace psrt::ps {
namespace {

using transport::testing::RecordingReceiver;
using transport::testing::Relay;
using transport::testing::Tamper;
using namespace std::chrono_literals;

constexpr int kSent = 5;
constexpr int kForged = 3;

// kSent real messages with payloads through a relay that injects kForged forged copies (one
// header byte flipped) ahead of the third; returns the receiving transport's drop count once
// every real message arrived.
std::uint64_t dropped_after_injection(transport::Transport*& server_out,
                                      std::unique_ptr<transport::Transport>& server) {
  transport::Options o;
  o.secure_secret = "drop-metric-test-secret-0123456789";
  o.connect_timeout = 3s;
  auto server_rx = std::make_shared<RecordingReceiver>();
  server = transport::create_transport("tcp", server_rx, o);
  // Frames 0 and 1 are the client's HELLO and CONFIRM; frame 2 + 2 is the third message.
  Relay relay(server->listen("127.0.0.1:0"), Tamper::kInjectForgedHeader, 4, nullptr, kForged);
  auto client = transport::create_transport("tcp", std::make_shared<RecordingReceiver>(), o);
  auto conn = client->connect(relay.address());
  std::vector<std::byte> payload(64 * 1024, std::byte{3});
  for (int i = 0; i < kSent; ++i) {
    ConstBuffer b{payload.data(), payload.size()};
    conn->send(transport::testing::bytes_of("message " + std::to_string(i)), {&b, 1},
               [](const Status&) {});
  }
  EXPECT_TRUE(server_rx->wait_messages(kSent, 10s)) << "every real message arrives";
  EXPECT_EQ(server_rx->message_count(), static_cast<std::size_t>(kSent));
  EXPECT_TRUE(server_rx->closed().empty()) << "the connection goes on";
  client->shutdown();
  server_out = server.get();
  return server->dropped_messages();
}

TEST(SecureDropMetric, EveryInjectedForgedFrameIsCountedInTheExposition) {
  enable_metrics(true);
  std::unique_ptr<transport::Transport> server;
  transport::Transport* t = nullptr;
  EXPECT_EQ(dropped_after_injection(t, server), static_cast<std::uint64_t>(kForged));
  // What a server's heartbeat reports, and what the scheduler notes of its own transport.
  note_process_counters(Role::kServer, *t);
  JobMetrics job;
  job.report(Role::kServer, 0, "127.0.0.1", process_metrics().snapshot());
  job.set_scheduler_dropped("10.0.0.1", t->dropped_messages());
  server->shutdown();
  const std::string text = runtime::MetricsHttp::render(job);
  for (const char* line : {
           "# TYPE psrt_secure_dropped_messages_total counter\n",
           "psrt_secure_dropped_messages_total{role=\"server\",rank=\"0\",host=\"127.0.0.1\"} 3\n",
           "psrt_secure_dropped_messages_total{role=\"scheduler\",rank=\"0\",host=\"10.0.0.1\"} "
           "3\n",
       })
    EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "\nin:\n" << text;
  enable_metrics(false);
}

// Without the secure mode nothing is dropped this way: the family is absent.
TEST(SecureDropMetric, APlainTransportReportsNoDrops) {
  auto t = transport::create_transport("tcp", std::make_shared<RecordingReceiver>());
  EXPECT_EQ(t->dropped_messages(), 0u);
  JobMetrics job;
  job.set_scheduler_dropped("10.0.0.1", 0);
  EXPECT_EQ(runtime::MetricsHttp::render(job).find("psrt_secure_dropped"), std::string::npos);
  t->shutdown();
}

}  // namespace
}  // namespace psrt::ps
