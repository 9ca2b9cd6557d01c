// Structured log lines: "<time> <level> [<prefix>] message". The prefix names the process's role
// and rank once set (set_log_prefix); the level comes from PSRT_LOG_LEVEL (debug|info|warn|error).
#pragma once

#include <fmt/core.h>

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

}  // namespace psrt::log

#define PSRT_LOG_DEBUG(...) ::psrt::log::emit(::psrt::log::Level::kDebug, __VA_ARGS__)
#define PSRT_LOG_INFO(...) ::psrt::log::emit(::psrt::log::Level::kInfo, __VA_ARGS__)
#define PSRT_LOG_WARN(...) ::psrt::log::emit(::psrt::log::Level::kWarn, __VA_ARGS__)
#define PSRT_LOG_ERROR(...) ::psrt::log::emit(::psrt::log::Level::kError, __VA_ARGS__)
