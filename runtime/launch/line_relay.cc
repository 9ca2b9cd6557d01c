#include "runtime/launch/line_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace psrt::launch::detail {
namespace {

constexpr std::size_t kReadChunk = std::size_t{64} * 1024;
// Reads per read_available() call: 1 MiB per stream per poll round.
constexpr int kReadsPerWakeup = 16;
// How long a full non-blocking sink may hold up the job before its output is dropped.
constexpr int kSinkWaitMs = 1000;

}  // namespace

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, kSinkWaitMs) == 0) return;
    } else if (errno != EINTR) {
      return;
    }
  }
}

LineRelay::LineRelay(UniqueFd source, std::string_view label, int sink)
    : source_(std::move(source)), sink_(sink) {
  // Appended piece by piece: g++ 12 warns falsely (-Wrestrict) about "[" + std::string&&.
  if (!label.empty()) {  // an empty label: lines pass through unprefixed
    prefix_.reserve(label.size() + 3);
    prefix_ += '[';
    prefix_ += label;
    prefix_ += "] ";
  }
}

bool LineRelay::read_once() {
  if (!source_.valid()) return false;
  const std::size_t old_size = pending_.size();
  pending_.resize(old_size + kReadChunk);
  ssize_t n;
  do {
    n = ::read(source_.get(), pending_.data() + old_size, kReadChunk);
  } while (n < 0 && errno == EINTR);
  pending_.resize(old_size + static_cast<std::size_t>(n > 0 ? n : 0));
  if (n > 0) return true;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  source_.reset();  // end of stream, or an error that ends it
  return false;
}

void LineRelay::read_available() {
  for (int i = 0; i < kReadsPerWakeup && read_once(); ++i) {
  }
  emit_complete_lines();
  if (!source_.valid()) emit_rest();
}

void LineRelay::finish() {
  // Bounded: only what is buffered in the pipe now is read.
  while (read_once())
    emit_complete_lines();
  emit_complete_lines();
  emit_rest();
  source_.reset();
}

void LineRelay::emit_complete_lines() {
  scratch_.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t newline = pending_.find('\n', start);
    if (newline == std::string::npos) {
      if (pending_.size() - start < kMaxLine) break;
      append_line(std::string_view(pending_).substr(start, kMaxLine));
      start += kMaxLine;
      continue;
    }
    append_line(std::string_view(pending_).substr(start, newline - start));
    start = newline + 1;
  }
  pending_.erase(0, start);
  // Only whole lines are written, batched into one write() per round.
  write_all(sink_, scratch_);
  scratch_.clear();
}

void LineRelay::emit_rest() {
  if (pending_.empty()) return;
  append_line(pending_);
  pending_.clear();
  write_all(sink_, scratch_);
  scratch_.clear();
}

void LineRelay::append_line(std::string_view line) {
  scratch_ += prefix_;
  scratch_ += line;
  scratch_ += '\n';
}

}  // namespace psrt::launch::detail
