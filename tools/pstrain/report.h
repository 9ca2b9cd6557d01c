// What pstrain tells the user while it trains: per-step metrics as JSON lines (--metrics), a
// progress bar on a terminal, otherwise a log line every --log-every steps.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace psrt::pstrain {

class MetricsFile {
 public:
  // An empty path writes nothing. Throws psrt::Error when the file cannot be opened.
  explicit MetricsFile(const std::string& path);
  bool enabled() const { return out_.is_open(); }
  // One JSON object per line, flushed so that a killed run keeps what it logged.
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
};

struct StepStats {
  std::int64_t step = 0;   // steps done, counting this one
  std::int64_t total = 0;  // steps this run will do
  std::int64_t epoch = 0;
  double loss = 0;
  double train_acc = 0;
  double samples_per_sec = 0;
  float lr = 0;
};

class Progress {
 public:
  // A bar when stdout is a terminal (and `tty_allowed`), else a line every `log_every` steps.
  Progress(std::int64_t log_every, bool tty_allowed);
  void step(const StepStats& s);
  // A line that must not be overwritten by the bar (evaluations, checkpoints).
  void note(const std::string& line);
  void finish();

 private:
  bool tty_;
  std::int64_t log_every_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace psrt::pstrain
