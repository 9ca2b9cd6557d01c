#include "tools/psrun/join.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include "psrt/error.h"

namespace psrt::psrun {

void write_join_file(const std::string& path, const JoinEnv& env) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join-file: cannot create '{}': {}", tmp, std::strerror(errno)));
  std::string text;
  for (const auto& [k, v] : env) {
    // One variable a line: a value holding a newline (a forwarded --env) cannot be written.
    if (v.find('\n') != std::string::npos) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--join-file: the job's variable {} holds a newline, which the join "
                              "file cannot carry: drop it from --env or from psrun's environment",
                              k));
    }
    text += fmt::format("{}={}\n", k, v);
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = ::close(fd) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join-file: cannot write '{}': {}", path, std::strerror(err)));
  }
}

JoinEnv read_join_file(const std::string& path) {
  // It holds the secret: a regular file private to its owner, checked on the descriptor read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join: cannot read '{}': {}", path, std::strerror(err)));
  }
  std::string text;
  if (S_ISREG(st.st_mode) && (st.st_mode & 077) == 0) {
    char chunk[4096];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(chunk, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join: '{}' is not a regular file", path));
  if ((st.st_mode & 077) != 0)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join: '{}' holds the job secret but is accessible to group or "
                            "others (mode {:04o}): chmod 600 '{}'",
                            path, st.st_mode & 07777, path));
  std::istringstream in(text);
  JoinEnv env;
  bool scheduler = false, secret = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    const auto eq = line.find('=');
    // The job's variables: PSRT_* and what psrun forwards (--env, PYTHONPATH, CUDA_*, NCCL_*).
    const bool named =
        eq != std::string::npos && eq > 0 &&
        std::isdigit(static_cast<unsigned char>(line[0])) == 0 &&
        std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
        });
    if (!named)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--join: line {} of '{}' is not NAME=VALUE: is it the file "
                              "psrun --join-file wrote?",
                              n, path));
    env.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    scheduler = scheduler || env.back().first == "PSRT_SCHEDULER";
    secret = secret || env.back().first == "PSRT_SECRET";
  }
  if (!scheduler || !secret)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--join: '{}' lacks PSRT_SCHEDULER or PSRT_SECRET: pass the file "
                            "that psrun --join-file wrote for the running job",
                            path));
  return env;
}

int exec_joiner(const std::string& path, const std::vector<std::string>& command) {
  if (command.empty()) {
    std::cerr << "psrun: --join needs the worker's COMMAND: psrun --join FILE -- COMMAND\n";
    return 2;
  }
  try {
    for (const auto& [k, v] : read_join_file(path))
      ::setenv(k.c_str(), v.c_str(), 1);
  } catch (const Error& e) {
    std::cerr << "psrun: " << e.what() << "\n";
    return 2;
  }
  ::setenv("PSRT_ROLE", "worker", 1);
  ::setenv("PSRT_RANK", "-1", 1);
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const auto& c : command)
    argv.push_back(const_cast<char*>(c.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::cerr << "psrun: --join: cannot run '" << command[0] << "': " << std::strerror(errno) << "\n";
  return 127;
}

JoinFile::JoinFile(std::string path, const JoinEnv& env) : path_(std::move(path)) {
  if (!path_.empty()) write_join_file(path_, env);
}

JoinFile::~JoinFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

}  // namespace psrt::psrun
