// Which workers train an epoch, agreed by all of them at its start (docs/elastic.md): a worker
// that joins a running job takes part from the next epoch on, and at that epoch's start every
// worker cuts the epoch's permutation into as many parts as the epoch has workers, so no sample
// is visited twice or skipped within an epoch.
//
// The agreement is one round of a small aggregate-only key (psrt/key_update.h, KeyUpdate::kSum:
// an allreduce through the servers) per epoch: every live worker pushes a record of the epoch it
// starts and a 1 at its rank; the round's sum, which every worker receives, is the plan.
#pragma once
#include <cstdint>
#include <vector>

#include "psrt/psrt.h"

namespace psrt::pstrain {

struct EpochPlan {
  std::int64_t epoch = -1;      // -1: none agreed yet
  std::int64_t first_step = 0;  // the job's step count at the epoch's start
  std::int64_t step_base = 0;   // the job's step - the servers' version (0: a fresh job)
  int world = 0;                // workers that train the epoch
  int part = -1;                // this worker's part: its rank's place among theirs
};

// The plan record of a sum of `values` (the key's value after a plan round) for worker `rank`.
// Throws psrt::Error (kInternal) when the record is not a sum of agreeing workers' records.
EpochPlan decode_epoch_plan(const std::vector<float>& values, int rank);
// One worker's record for a plan round.
std::vector<float> encode_epoch_plan(const EpochPlan& plan, int rank);

class EpochPlanner {
 public:
  // Ranks at or above this have no place in the record.
  static constexpr int kMaxRanks = 1024;

  // Stores the plan key (the first worker's init wins). Throws psrt::Error when the servers
  // refuse an aggregate-only key (mode async or ssp, cuda servers, --replicas 2) or this
  // worker's rank is kMaxRanks or more.
  explicit EpochPlanner(Worker& worker);

  // Every live worker calls this at the start of every epoch with the same epoch, step and
  // step base; returns once all of them did, with the epoch's workers and this worker's part.
  // Throws psrt::Error (kInternal) when the workers disagree.
  EpochPlan agree(std::int64_t epoch, std::int64_t first_step, std::int64_t step_base);
  // The last plan agreed, read without taking part (a joiner finds the next epoch's start from
  // it); epoch -1 when none yet. part is -1 for a worker that is not in it.
  EpochPlan last();

 private:
  Worker& worker_;
  std::vector<float> out_;
};

}  // namespace psrt::pstrain
