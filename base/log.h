// Structured log lines: "<time> <level> [<prefix>] message". The prefix names the process's role
// and rank once set (set_log_prefix); the level comes from PSRT_LOG_LEVEL (debug|info|warn|error).
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace psrt::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

Level level() noexcept;
void set_level(Level level) noexcept;
void set_prefix(std::string prefix);
void write(Level level, std::string_view message);

template <typename... Args>
void emit(Level lvl, fmt::format_string<Args...> format, Args&&... args) {
  if (lvl < level()) return;
  write(lvl, fmt::format(format, std::forward<Args>(args)...));
}

// Lets through at most `burst` lines per `interval`; the rest are counted, and the next line let
// through says how many were suppressed. For warnings that hostile input can repeat at will
// (refused handshakes, accept failures, dropped messages), so that an attacker cannot turn the
// log into the bottleneck. Thread-safe.
class RateLimit {
 public:
  explicit RateLimit(int burst = 10, std::chrono::milliseconds interval = std::chrono::seconds(1))
      : burst_(burst), interval_(interval) {}
  // True when a line may be written now; `suppressed` gets the lines dropped since the last one.
  bool allow(std::uint64_t& suppressed) noexcept;

 private:
  const int burst_;
  const std::chrono::milliseconds interval_;
  std::atomic<std::int64_t> window_start_{0};  // steady_clock ticks
  std::atomic<int> in_window_{0};
  std::atomic<std::uint64_t> suppressed_{0};
};

template <typename... Args>
void emit_limited(RateLimit& limit, Level lvl, fmt::format_string<Args...> format, Args&&... args) {
  if (lvl < level()) return;
  std::uint64_t suppressed = 0;
  if (!limit.allow(suppressed)) return;
  auto text = fmt::format(format, std::forward<Args>(args)...);
  if (suppressed > 0) text += fmt::format(" ({} similar lines suppressed)", suppressed);
  write(lvl, text);
}

}  // namespace psrt::log

#define PSRT_LOG_DEBUG(...) ::psrt::log::emit(::psrt::log::Level::kDebug, __VA_ARGS__)
#define PSRT_LOG_INFO(...) ::psrt::log::emit(::psrt::log::Level::kInfo, __VA_ARGS__)
#define PSRT_LOG_WARN(...) ::psrt::log::emit(::psrt::log::Level::kWarn, __VA_ARGS__)
#define PSRT_LOG_ERROR(...) ::psrt::log::emit(::psrt::log::Level::kError, __VA_ARGS__)
// One rate limit per call site (10 lines a second, then a count of what was suppressed).
#define PSRT_LOG_WARN_LIMITED(...)                                                      \
  do {                                                                                  \
    static ::psrt::log::RateLimit psrt_log_limit_;                                      \
    ::psrt::log::emit_limited(psrt_log_limit_, ::psrt::log::Level::kWarn, __VA_ARGS__); \
  } while (0)
