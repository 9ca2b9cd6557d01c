// Copies one child's output stream to psrun's stdout or stderr, a whole line at a time, each line
// prefixed with the process's label: "[worker 3] loss 0.12" (no prefix for an empty label).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "runtime/launch/unique_fd.h"

namespace psrt::launch::detail {

// Writes all of `data` to `fd`, retrying on EINTR and waiting (bounded) while a non-blocking fd
// is full. Output that cannot be written (closed pipe, full disk) is dropped: the job does not
// fail because its log went away.
void write_all(int fd, std::string_view data);

class LineRelay {
 public:
  // Longest line kept whole; a longer one is written in pieces of this size, each ending a line.
  static constexpr std::size_t kMaxLine = std::size_t{1} << 20;

  // `source`: the non-blocking read end of the child's pipe (owned). `sink`: psrun's fd (not
  // owned), written only from the thread that calls the methods below.
  LineRelay(UniqueFd source, std::string_view label, int sink);

  // The fd to poll for input; -1 once the stream has ended.
  int fd() const noexcept { return source_.get(); }
  bool open() const noexcept { return source_.valid(); }

  // Reads what the pipe holds now (bounded, so one chatty process cannot starve the others) and
  // writes the complete lines. At end of stream writes the last line even without its newline
  // and closes the source.
  void read_available();

  // Reads what is left without waiting for the writers to go, writes it including a last partial
  // line, and closes the source. For the end of a job, when descendants of a process may still
  // hold its pipe open.
  void finish();

 private:
  // Reads once; false when nothing more is available now or the stream has ended.
  bool read_once();
  void emit_complete_lines();
  void emit_rest();
  void append_line(std::string_view line);

  UniqueFd source_;
  std::string prefix_;  // "[label] "
  int sink_;
  std::string pending_;  // bytes after the last newline seen
  std::string scratch_;  // the next write: whole prefixed lines
};

}  // namespace psrt::launch::detail
