#include "runtime/metrics_http.h"

#include <fmt/core.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <stdexcept>

#include "psrt/error.h"
#include "runtime/env_contract.h"

namespace psrt::runtime {
namespace {

prometheus::MetricType type_of(ps::MetricKind k) {
  switch (k) {
    case ps::MetricKind::kCounter:
      return prometheus::MetricType::Counter;
    case ps::MetricKind::kGauge:
      return prometheus::MetricType::Gauge;
    case ps::MetricKind::kHistogram:
      return prometheus::MetricType::Histogram;
  }
  return prometheus::MetricType::Untyped;
}

std::vector<prometheus::MetricFamily> collect(const ps::JobMetrics& metrics) {
  std::vector<prometheus::MetricFamily> out;
  for (const auto& f : metrics.families()) {
    prometheus::MetricFamily pf;
    pf.name = f.name;
    pf.help = f.help;
    pf.type = type_of(f.kind);
    for (const auto& s : f.series) {
      prometheus::ClientMetric m;
      for (const auto& [name, value] : s.labels)
        m.label.push_back({name, value});
      switch (f.kind) {
        case ps::MetricKind::kCounter:
          m.counter.value = s.value;
          break;
        case ps::MetricKind::kGauge:
          m.gauge.value = s.value;
          break;
        case ps::MetricKind::kHistogram:
          m.histogram.sample_sum = s.value;
          m.histogram.sample_count = s.count;
          for (const auto& [bound, n] : s.buckets)
            m.histogram.bucket.push_back({n, bound});
          break;
      }
      pf.metric.push_back(std::move(m));
    }
    out.push_back(std::move(pf));
  }
  return out;
}

// What the exposer asks on every scrape: a snapshot under JobMetrics' own (leaf) lock.
class JobCollectable final : public prometheus::Collectable {
 public:
  explicit JobCollectable(std::shared_ptr<ps::JobMetrics> metrics) : metrics_(std::move(metrics)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect(*metrics_); }

 private:
  std::shared_ptr<ps::JobMetrics> metrics_;
};

}  // namespace

struct MetricsHttp::Impl {
  std::shared_ptr<JobCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
};

MetricsHttp::MetricsHttp(const std::string& bind_host, int port,
                         std::shared_ptr<ps::JobMetrics> metrics)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--metrics-port {}: not a port number (0-65535)", port));
  const std::string where = fmt::format("{}:{}", bind_host, port);
  try {
    // Two threads serve scrapes; a client that stalls is cut off after 5 s.
    impl_->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", where, "num_threads", "2", "request_timeout_ms", "5000"});
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--metrics-port {}: cannot serve metrics on {} ({}): the port is in "
                            "use or not allowed here; pick another port (0: any free one)",
                            port, where, e.what()));
  }
  impl_->collectable = std::make_shared<JobCollectable>(std::move(metrics));
  impl_->exposer->RegisterCollectable(impl_->collectable);
  const auto ports = impl_->exposer->GetListeningPorts();
  port_ = ports.empty() ? port : ports.front();
}

MetricsHttp::~MetricsHttp() = default;

std::string MetricsHttp::render(const ps::JobMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(collect(metrics));
}

int metrics_port_from_env() {
  const std::string v = env_string("PSRT_METRICS_PORT");
  if (v.empty()) return -1;
  return static_cast<int>(env_int("PSRT_METRICS_PORT", 0, 65535));
}

}  // namespace psrt::runtime
