// psrun's SIGUSR1: asks the running job for a job checkpoint at its next round by writing
// <--checkpoint-dir>/CHECKPOINT-NOW (ps/job_checkpoint.h; pstrain's worker 0 takes it). The
// handler makes only async-signal-safe calls (open, write, close, rename) and says on stderr what
// it did; without --checkpoint-dir it says that there is nowhere to checkpoint to. Installed for
// the whole of psrun's life; children get the default disposition back at exec.
#pragma once

#include <string>

namespace psrt::psrun {

void install_checkpoint_signal(const std::string& checkpoint_dir);

}  // namespace psrt::psrun
