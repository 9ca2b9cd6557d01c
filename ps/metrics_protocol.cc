// The metrics' table (ps/metrics.h) and METRICS records on the wire: encode and the checked
// decode, apart from the process's counters so that the protocol fuzzer links them alone.
#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <iterator>

#include "ps/metrics.h"
#include "transport/wire.h"

namespace psrt::ps {
using wire::load;
using wire::store;

namespace {

constexpr MetricInfo kInfo[] = {
#define PSRT_METRIC_INFO(e, name, kind, buckets, per_worker, help) \
  {name, MetricKind::kind, buckets, per_worker, help},
    PSRT_METRICS(PSRT_METRIC_INFO)
#undef PSRT_METRIC_INFO
};
static_assert(std::size(kInfo) == kMetricCount);

}  // namespace

const MetricInfo& info(Metric m) noexcept {
  return kInfo[static_cast<std::size_t>(m)];
}

std::vector<std::byte> encode_metrics(std::span<const MetricRecord> records) {
  std::vector<std::byte> out(records.size() * kMetricRecordBytes);
  std::byte* p = out.data();
  for (const auto& r : records) {
    store<std::uint16_t>(p, static_cast<std::uint16_t>(r.metric));
    store<std::uint16_t>(p + 2, r.part);
    store<std::uint32_t>(p + 4, r.worker);
    store<std::uint64_t>(p + 8, std::bit_cast<std::uint64_t>(r.value));
    p += kMetricRecordBytes;
  }
  return out;
}

Status decode_metrics(std::span<const std::byte> bytes, std::vector<MetricRecord>& out) {
  if (bytes.size() % kMetricRecordBytes != 0)
    return protocol_error(fmt::format("metrics of {} bytes are not whole {}-byte records",
                                      bytes.size(), kMetricRecordBytes));
  out.clear();
  for (std::size_t at = 0; at < bytes.size(); at += kMetricRecordBytes) {
    const std::byte* p = bytes.data() + at;
    const std::size_t n = at / kMetricRecordBytes;
    const auto id = load<std::uint16_t>(p);
    if (id >= kMetricCount)
      return protocol_error(fmt::format("metrics record {}: unknown metric {}", n, id));
    MetricRecord r;
    r.metric = static_cast<Metric>(id);
    r.part = load<std::uint16_t>(p + 2);
    r.worker = load<std::uint32_t>(p + 4);
    r.value = std::bit_cast<double>(load<std::uint64_t>(p + 8));
    const MetricInfo& m = info(r.metric);
    const std::size_t parts = m.kind == MetricKind::kHistogram ? 1 + kBuckets : 1;
    if (r.part >= parts)
      return protocol_error(
          fmt::format("metrics record {}: part {} of {}, which has {}", n, r.part, m.name, parts));
    if (m.per_worker ? r.worker >= ProcessMetrics::kMaxTrackedWorkers : r.worker != kAnyRank)
      return protocol_error(fmt::format("metrics record {}: worker {} on {}", n, r.worker, m.name));
    if (!std::isfinite(r.value) || r.value < 0)
      return protocol_error(
          fmt::format("metrics record {}: {} = {} is not a finite value >= 0", n, m.name, r.value));
    out.push_back(r);
  }
  return {};
}

}  // namespace psrt::ps
