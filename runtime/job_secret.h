// The job secret, read in one place by every process of a job: psrun and psbench, which start
// jobs, and the servers, workers and engine-started ranks that join one.
#pragma once

#include <string>

namespace psrt::runtime {

// What job_secret() does when no secret is given.
enum class NoSecret {
  kRefuse,    // a process joining a job: it cannot make one up
  kGenerate,  // a launcher: a fresh random one, which it hands to the processes it starts
};

// The first of: `file` (psrun --secret-file; empty: none), PSRT_SECRET, the file PSRT_SECRET_FILE
// names. The files must be private (chmod 600) and a secret holds at least ps::kMinSecretChars
// characters (ps/session/auth.h): otherwise psrt::Error naming where it came from. With none of
// them: see NoSecret; kRefuse throws psrt::Error (kInvalidArgument) saying how to give one.
std::string job_secret(NoSecret none, const std::string& file = {});

}  // namespace psrt::runtime
