// The PSRT_* environment contract: every variable psrun hands its processes, declared once with
// its default and meaning. `psrun --help-env` prints this table; readers go through env_*()
// so a malformed value is an error naming the variable.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace psrt::runtime {

struct EnvVar {
  const char* name;
  const char* fallback;  // "" = no default (required where it is read)
  const char* readers;   // which processes read it
  const char* meaning;
};

const std::vector<EnvVar>& env_contract();
void print_env_help(std::ostream& out);

// Variables a launcher sets for the processes of its job, over its own environment (which they
// inherit): what those processes will read. Read through it (`job` below), psrun's scheduler
// takes its configuration from the very values the job's servers get.
using JobEnv = std::vector<std::pair<std::string, std::string>>;

// The value (from `job` when set there, else this process's environment), or the contract's
// default. Throws psrt::Error(kInvalidArgument) when the variable is required (no default) and
// unset.
std::string env_string(const char* name, const JobEnv& job = {});
std::int64_t env_int(const char* name, std::int64_t min, std::int64_t max, const JobEnv& job = {});
float env_float(const char* name);
bool env_bool(const char* name, const JobEnv& job = {});
std::chrono::milliseconds env_ms(const char* name, const JobEnv& job = {});
// PSRT_SHARDING: true for "balanced", false for "fixed"; anything else throws.
bool balanced_cut_from_env(const JobEnv& job = {});

}  // namespace psrt::runtime
