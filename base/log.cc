#include "base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

namespace psrt::log {
namespace {

Level level_from_env() {
  const char* v = std::getenv("PSRT_LOG_LEVEL");
  if (v == nullptr) return Level::kInfo;
  std::string_view s(v);
  if (s == "debug") return Level::kDebug;
  if (s == "info") return Level::kInfo;
  if (s == "warn") return Level::kWarn;
  if (s == "error") return Level::kError;
  if (s == "off") return Level::kOff;
  std::fprintf(stderr,
               "psrt: PSRT_LOG_LEVEL=%s is not one of debug|info|warn|error|off; using info\n", v);
  return Level::kInfo;
}

std::atomic<Level>& current_level() {
  static std::atomic<Level> lvl{level_from_env()};
  return lvl;
}

std::mutex& write_mutex() {
  static std::mutex m;
  return m;
}

std::string& prefix() {
  static std::string p = "psrt";
  return p;
}

constexpr std::string_view kNames[] = {"DEBUG", "INFO ", "WARN ", "ERROR", "OFF  "};

}  // namespace

Level level() noexcept {
  return current_level().load(std::memory_order_relaxed);
}
void set_level(Level lvl) noexcept {
  current_level().store(lvl, std::memory_order_relaxed);
}

void set_prefix(std::string p) {
  std::lock_guard lock(write_mutex());
  prefix() = std::move(p);
}

void write(Level lvl, std::string_view message) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::lock_guard lock(write_mutex());
  std::fprintf(stderr, "%s.%03d %s [%s] %.*s\n", stamp, static_cast<int>(ms),
               kNames[static_cast<int>(lvl)].data(), prefix().c_str(),
               static_cast<int>(message.size()), message.data());
}

bool RateLimit::allow(std::uint64_t& suppressed) noexcept {
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::int64_t span =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval_).count();
  std::int64_t start = window_start_.load(std::memory_order_relaxed);
  if (now - start >= span && window_start_.compare_exchange_strong(start, now)) {
    in_window_.store(0, std::memory_order_relaxed);
  }
  if (in_window_.fetch_add(1, std::memory_order_relaxed) >= burst_) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace psrt::log
