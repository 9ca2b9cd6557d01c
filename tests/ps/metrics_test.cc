// Live metrics (ps/metrics.h, ps/job_metrics.h, runtime/metrics_http.h): the METRICS records'
// codec and what it refuses, the recorder off and on, and the exposition a scrape gets, exact.
#include "ps/metrics.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <tuple>

#include "ps/job_metrics.h"
#include "ps/metric_hooks.h"
#include "runtime/metrics_http.h"

namespace psrt::ps {
namespace {

TEST(MetricsCodec, RoundTripsEveryField) {
  const std::vector<MetricRecord> in = {{Metric::kWorkerPushedBytes, 0, kAnyRank, 4096},
                                        {Metric::kServerUpdateSeconds, 3, kAnyRank, 7},
                                        {Metric::kSyncLagSeconds, 0, 5, 0.125}};
  const auto bytes = encode_metrics(in);
  ASSERT_EQ(bytes.size(), 3 * kMetricRecordBytes);
  std::vector<MetricRecord> out;
  ASSERT_TRUE(decode_metrics(bytes, out).ok());
  ASSERT_EQ(out.size(), 3u);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].metric, in[i].metric);
    EXPECT_EQ(out[i].part, in[i].part);
    EXPECT_EQ(out[i].worker, in[i].worker);
    EXPECT_EQ(out[i].value, in[i].value);
  }
}

void expect_refused(MetricRecord r, const std::string& why) {
  std::vector<MetricRecord> out;
  const Status s = decode_metrics(encode_metrics({&r, 1}), out);
  EXPECT_EQ(s.code(), ErrorCode::kProtocol);
  EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
}

TEST(MetricsCodec, RefusesWhatNoProcessSends) {
  expect_refused({static_cast<Metric>(kMetricCount), 0, kAnyRank, 1}, "unknown metric");
  expect_refused({Metric::kWorkerPushes, 1, kAnyRank, 1}, "part 1 of psrt_worker_pushes_total");
  expect_refused({Metric::kServerUpdateSeconds, kBuckets + 1, kAnyRank, 1}, "part 14");
  expect_refused({Metric::kWorkerPushes, 0, 3, 1}, "worker 3 on psrt_worker_pushes_total");
  expect_refused({Metric::kSyncLagSeconds, 0, kAnyRank, 1}, "worker 4294967295");
  expect_refused({Metric::kWorkerPushes, 0, kAnyRank, -1}, "not a finite value >= 0");
  expect_refused({Metric::kWorkerPushes, 0, kAnyRank, std::nan("")}, "not a finite value");
  expect_refused({Metric::kWorkerPushes, 0, kAnyRank, std::numeric_limits<double>::infinity()},
                 "not a finite value");
  std::vector<MetricRecord> out;
  const std::vector<std::byte> ragged(kMetricRecordBytes + 3);
  EXPECT_EQ(decode_metrics(ragged, out).code(), ErrorCode::kProtocol);
}

// One process's recorder: nothing while off (the hooks' fast path), exact values while on.
TEST(ProcessMetricsTest, RecordsNothingOffAndExactlyOn) {
  enable_metrics(false);
  ProcessMetrics m;
  m.add(Metric::kWorkerPushedBytes, 10);
  m.observe(Metric::kWorkerRoundSeconds, 0.002);
  EXPECT_EQ(metrics_now(), MetricsClock::time_point{});
  EXPECT_TRUE(m.snapshot().empty());
  enable_metrics(true);
  m.add(Metric::kWorkerPushedBytes, 10);
  m.add(Metric::kWorkerPushedBytes, 32);
  m.observe(Metric::kWorkerRoundSeconds, 0.002);  // bucket 3: (0.001, 0.003]
  m.observe(Metric::kWorkerRoundSeconds, 100);    // +Inf
  m.add_for(Metric::kSyncLagSeconds, 2, 0.5);
  m.count_step(7);
  m.count_step(8);
  m.count_step(7);
  enable_metrics(false);
  std::map<std::tuple<Metric, int, std::uint32_t>, double> got;
  for (const auto& r : m.snapshot())
    got[{r.metric, r.part, r.worker}] = r.value;
  const std::map<std::tuple<Metric, int, std::uint32_t>, double> want = {
      {{Metric::kWorkerPushedBytes, 0, kAnyRank}, 42},
      {{Metric::kWorkerRoundSeconds, 4, kAnyRank}, 1},
      {{Metric::kWorkerRoundSeconds, kBuckets, kAnyRank}, 1},
      {{Metric::kWorkerRoundSeconds, 0, kAnyRank}, 100.002},
      {{Metric::kSyncLagSeconds, 0, 2}, 0.5},
      {{Metric::kWorkerSteps, 0, kAnyRank}, 2}};
  EXPECT_EQ(got, want);
}

TEST(JobMetricsTest, RendersEverySeriesWithRoleRankAndHost) {
  JobMetrics job;
  job.set_live(2, 1);
  job.event("worker_joined");
  job.report(Role::kWorker, 1, "10.0.0.7",
             {{Metric::kWorkerPushedBytes, 0, kAnyRank, 4000},
              {Metric::kWorkerSteps, 0, kAnyRank, 5},
              {Metric::kWorkerRoundSeconds, 1, kAnyRank, 2},
              {Metric::kWorkerRoundSeconds, 3, kAnyRank, 1},
              {Metric::kWorkerRoundSeconds, 0, kAnyRank, 0.0021}});
  job.report(Role::kServer, 0, "10.0.0.8", {{Metric::kSyncLagSeconds, 0, 1, 0.25}});
  const std::string text = runtime::MetricsHttp::render(job);
  for (const char* line : {
           "# TYPE psrt_job_workers gauge\npsrt_job_workers 2\n",
           "psrt_job_servers 1\n",
           "psrt_job_membership_events_total{event=\"worker_joined\"} 1\n",
           "psrt_job_rounds_total 5\n",
           "psrt_process_up{role=\"worker\",rank=\"1\",host=\"10.0.0.7\"} 1\n",
           "psrt_process_up{role=\"server\",rank=\"0\",host=\"10.0.0.8\"} 1\n",
           "# TYPE psrt_worker_pushed_bytes_total counter\n"
           "psrt_worker_pushed_bytes_total{role=\"worker\",rank=\"1\",host=\"10.0.0.7\"} 4000\n",
           "psrt_worker_push_pull_seconds_count{role=\"worker\",rank=\"1\",host=\"10.0.0.7\"} 3\n",
           "psrt_worker_push_pull_seconds_sum{role=\"worker\",rank=\"1\",host=\"10.0.0.7\"} "
           "0.0021\n",
           "psrt_worker_push_pull_seconds_bucket{role=\"worker\",rank=\"1\",host=\"10.0.0.7\","
           "le=\"0.0001\"} 2\n",
           "psrt_worker_push_pull_seconds_bucket{role=\"worker\",rank=\"1\",host=\"10.0.0.7\","
           "le=\"0.0003\"} 2\n",
           "psrt_worker_push_pull_seconds_bucket{role=\"worker\",rank=\"1\",host=\"10.0.0.7\","
           "le=\"0.001\"} 3\n",
           "psrt_worker_push_pull_seconds_bucket{role=\"worker\",rank=\"1\",host=\"10.0.0.7\","
           "le=\"+Inf\"} 3\n",
           "psrt_sync_lag_seconds_total{role=\"server\",rank=\"0\",host=\"10.0.0.8\","
           "worker=\"1\"} 0.25\n",
       })
    EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "\nin:\n" << text;
  // Nothing reported: no family of it (a counter that never moved is absent, not 0).
  EXPECT_EQ(text.find("psrt_server_updates_total"), std::string::npos);
  EXPECT_EQ(text.find("psrt_link_utilization_ratio"), std::string::npos);  // no --link-gbps
}

TEST(JobMetricsTest, LinkUseIsTheBusierDirectionOverTheLinkRate) {
  JobMetrics job(8.0);  // 8 Gbit/s = 1e9 bytes/s
  job.report(Role::kWorker, 0, "h", {{Metric::kWorkerPushedBytes, 0, kAnyRank, 0}});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  job.report(Role::kWorker, 0, "h",
             {{Metric::kWorkerPushedBytes, 0, kAnyRank, 1e8},
              {Metric::kWorkerPulledBytes, 0, kAnyRank, 1e7}});
  double ratio = -1;
  for (const auto& f : job.families())
    if (f.name == "psrt_link_utilization_ratio") ratio = f.series.at(0).value;
  // 1e8 bytes in >= 0.2 s: at most 0.5 of the link, and more than 0.1 unless this host stalled.
  EXPECT_GT(ratio, 0.1);
  EXPECT_LE(ratio, 0.5);
}

std::string http_get(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)::send(fd, req.data(), req.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

TEST(MetricsHttpTest, ServesTheJobAndRefusesATakenPort) {
  auto job = std::make_shared<JobMetrics>();
  job->set_live(3, 2);
  runtime::MetricsHttp http("127.0.0.1", 0, job);
  ASSERT_GT(http.port(), 0);
  const std::string reply = http_get(http.port());
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
  EXPECT_NE(reply.find("psrt_job_workers 3\n"), std::string::npos) << reply;
  try {
    runtime::MetricsHttp again("127.0.0.1", http.port(), job);
    FAIL() << "a second endpoint listened on a taken port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(fmt::format("--metrics-port {}", http.port())),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("in use or not allowed"), std::string::npos);
  }
}

}  // namespace
}  // namespace psrt::ps
