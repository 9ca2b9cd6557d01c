// Growing a running job by a worker (docs/elastic.md). `psrun --join-file F ...` writes F once
// the job's scheduler listens: the worker environment of the job (scheduler, transport, secret,
// mode, ...) as KEY=VALUE lines, private to its owner (chmod 600, it holds the secret), removed
// when the job ends. `psrun --join F -- COMMAND` runs COMMAND as one more worker of that job: a
// worker that joins at a round boundary, pulls the current weights, and takes part from the next
// round (Worker::joined()).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace psrt::psrun {

using JoinEnv = std::vector<std::pair<std::string, std::string>>;

// Writes `env` to `path` (mode 0600, replaced atomically). Throws psrt::Error naming the file.
void write_join_file(const std::string& path, const JoinEnv& env);

// Reads a join file: it must be a regular file private to its owner and hold KEY=VALUE lines of
// PSRT_* variables including PSRT_SCHEDULER and PSRT_SECRET. Throws psrt::Error(kInvalidArgument)
// naming the file and what is wrong.
JoinEnv read_join_file(const std::string& path);

// Replaces this process by `command` with the job's environment from `path` (PSRT_ROLE=worker,
// PSRT_RANK=-1: any free rank) added to its own. Returns only on failure: psrun's exit status,
// the cause on stderr.
int exec_joiner(const std::string& path, const std::vector<std::string>& command);

// Removes the join file when the job ends.
class JoinFile {
 public:
  JoinFile(std::string path, const JoinEnv& env);
  ~JoinFile();
  JoinFile(const JoinFile&) = delete;
  JoinFile& operator=(const JoinFile&) = delete;

 private:
  std::string path_;
};

}  // namespace psrt::psrun
