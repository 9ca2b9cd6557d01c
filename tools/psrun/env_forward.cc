#include "tools/psrun/env_forward.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <map>

#include "psrt/error.h"

namespace psrt::psrun {
namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool forwarded_by_default(const std::string& name) {
  if (name == "PYTHONPATH") return true;
  if (name == "CUDA_VISIBLE_DEVICES") return false;
  return name.starts_with("CUDA_") || name.starts_with("NCCL_");
}

}  // namespace

void add_env_option(CLI::App& app, std::vector<std::string>& specs) {
  app.add_option("--env", specs,
                 "NAME[=VALUE]: set NAME in every process of the job, on every launcher (like "
                 "mpirun -x; NAME alone: its value here); repeatable. PYTHONPATH, CUDA_* (but "
                 "CUDA_VISIBLE_DEVICES) and NCCL_* go by default")
      ->take_all()
      ->allow_extra_args(false);
}

std::vector<std::pair<std::string, std::string>> forwarded_env(
    const std::vector<std::string>& specs, char** environ,
    const std::vector<std::string>& reserved) {
  std::map<std::string, std::string> here;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) here[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : here)
    if (forwarded_by_default(k)) out[k] = v;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    if (!valid_name(name))
      throw Error(
          ErrorCode::kInvalidArgument,
          fmt::format("--env {}: '{}' is not a variable name (letters, digits, _)", spec, name));
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--env {}: psrun sets {} itself (psrun --help-env)", spec, name));
    if (eq != std::string::npos) {
      out[name] = spec.substr(eq + 1);
    } else if (auto it = here.find(name); it != here.end()) {
      out[name] = it->second;
    } else {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--env {}: {} is not set here; give its value (--env {}=VALUE)", spec,
                              name, name));
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace psrt::psrun
