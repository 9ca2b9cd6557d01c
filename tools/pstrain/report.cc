#include "pstrain/report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "base/log.h"
#include "psrt/error.h"

namespace psrt::pstrain {

MetricsFile::MetricsFile(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--metrics {}: cannot open it for writing", path));
}

void MetricsFile::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_)
    throw Error(ErrorCode::kSystem, "--metrics: writing a line failed (is the disk full?)");
}

Progress::Progress(std::int64_t log_every, bool tty_allowed)
    : tty_(tty_allowed && ::isatty(STDOUT_FILENO) == 1), log_every_(log_every) {}

void Progress::step(const StepStats& s) {
  if (!tty_) {
    if (s.step % log_every_ == 0 || s.step == s.total)
      PSRT_LOG_INFO("epoch {} step {}/{} loss {:.4f} train_acc {:.4f} {:.0f} samples/s lr {:g}",
                    s.epoch, s.step, s.total, s.loss, s.train_acc, s.samples_per_sec, s.lr);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (s.step != s.total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int done = s.total ? static_cast<int>(kWidth * s.step / s.total) : kWidth;
  std::string bar(static_cast<std::size_t>(done), '=');
  if (done < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  std::printf("\r[%s] %lld/%lld epoch %lld loss %.4f acc %.3f %.0f samples/s ", bar.c_str(),
              static_cast<long long>(s.step), static_cast<long long>(s.total),
              static_cast<long long>(s.epoch), s.loss, s.train_acc, s.samples_per_sec);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Progress::note(const std::string& line) {
  if (bar_drawn_) std::printf("\n");
  bar_drawn_ = false;
  if (tty_) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  } else {
    PSRT_LOG_INFO("{}", line);
  }
}

void Progress::finish() {
  if (bar_drawn_) std::printf("\n");
  bar_drawn_ = false;
  std::fflush(stdout);
}

}  // namespace psrt::pstrain
