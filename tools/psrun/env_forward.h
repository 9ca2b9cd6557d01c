// psrun --env NAME[=VALUE] (repeatable, like mpirun's -x): variables handed to every process of
// the job on every launcher, added to the environment psrun sets. PYTHONPATH and the CUDA_* and
// NCCL_* variables of psrun's own environment go by default (CUDA_VISIBLE_DEVICES excepted: it
// names one host's GPUs; pass --env CUDA_VISIBLE_DEVICES to send it anyway).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace CLI {  // NOLINT(readability-identifier-naming): CLI11 names it
class App;
}

namespace psrt::psrun {

void add_env_option(CLI::App& app, std::vector<std::string>& specs);

// The variables to forward: the defaults found in `environ` (NAME=VALUE strings, null-ended),
// then each --env spec (NAME=VALUE, or NAME: its value in `environ`). Throws psrt::Error
// (kInvalidArgument) naming the spec for a malformed name, a NAME unset in psrun's environment,
// or a variable psrun sets itself (`reserved`).
std::vector<std::pair<std::string, std::string>> forwarded_env(
    const std::vector<std::string>& specs, char** environ,
    const std::vector<std::string>& reserved);

}  // namespace psrt::psrun
