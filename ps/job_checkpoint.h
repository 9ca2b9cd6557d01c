// Job checkpoints: one round r of the whole job. The servers' slice files of round r (weights
// and momentum, ps/checkpoint.h), one part per worker, <dir>/r<round>/w<rank>.part (bytes the
// worker chooses: pstrain's step, BatchNorm buffers and RNG), and the job manifest
// <dir>/r<round>/JOB, written last, only once every worker's part and every slice of the
// scheduler's MANIFEST is on disk. Every file is written atomically (ps::write_checkpoint_file).
// A directory of job checkpoints is marked so (<dir>/JOB-CHECKPOINTS, written by the workers
// before their first round): a job then resumes only from a round whose JOB and parts are valid
// (ps::find_resume_round), so the servers and the workers resume from the same moment.
//
// On demand: a worker calls request_checkpoint(dir, r) before it pushes round r - 1, which
// writes <dir>/r<round>.request; a server writes its slices of a round so requested as it
// writes those of its cadence (in sync mode every slice's round r waits for that worker's
// gradient, so the request is on disk before any update of round r runs), and every worker
// finds the request by the end of its step r (whose forward waited for round r - 1, which waited
// for the requester's gradient). psrun turns SIGUSR1 into <dir>/CHECKPOINT-NOW, which pstrain's
// worker 0 takes (take_checkpoint_now) and answers with a request for round step + 2. Requested
// rounds are not pruned by the servers.
//
// JOB (text):
//   psrt-job 1 round R workers N
//   w<rank> <bytes> <FNV-1a 64 of the part, 16 hex digits>      one line per rank 0..N-1
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace psrt::ps {

std::string worker_part_path(const std::string& dir, std::uint64_t round, std::uint32_t rank);
std::string job_manifest_path(const std::string& dir, std::uint64_t round);

// Writes worker `rank`'s part of `round`. Throws psrt::Error (kSystem) naming the file.
void write_worker_part(const std::string& dir, std::uint64_t round, std::uint32_t rank,
                       std::span<const std::byte> bytes);
// Worker `rank`'s part of `round`, checked against the round's JOB (size and checksum). Throws
// psrt::Error (kInvalidArgument) naming the file and the cause.
std::vector<std::byte> read_worker_part(const std::string& dir, std::uint64_t round,
                                        std::uint32_t rank);

// Declares `round` complete: checks that workers 0..workers-1 wrote their parts and that every
// slice of <dir>/MANIFEST (a job of num_servers servers) has a valid file of `round`, then
// writes JOB. Throws psrt::Error (kNotFound) naming the first part that is missing or
// unusable; nothing is written then.
void complete_job_round(const std::string& dir, std::uint64_t round, std::uint32_t workers,
                        std::uint32_t num_servers, std::size_t partition_bytes);

// The on-demand checkpoints above. request_checkpoint throws psrt::Error (kSystem).
std::string checkpoint_request_path(const std::string& dir, std::uint64_t round);
void request_checkpoint(const std::string& dir, std::uint64_t round);
bool checkpoint_requested(const std::string& dir, std::uint64_t round);
std::string checkpoint_now_path(const std::string& dir);
// True (and the file removed) when <dir>/CHECKPOINT-NOW is there.
bool take_checkpoint_now(const std::string& dir);

// Marks `dir` as a directory of job checkpoints (idempotent). Throws psrt::Error (kSystem).
void mark_job_checkpoints(const std::string& dir);
// Whether `dir` is marked so, or any round of it holds a JOB.
bool has_job_checkpoints(const std::string& dir);
// True when `round`'s JOB is there and every part it lists is there with its size and checksum.
// False, with `why`, when JOB or a part is missing; throws psrt::Error (kInvalidArgument) naming
// the file when one is there but damaged.
bool job_round_complete(const std::string& dir, std::uint64_t round, std::string* why);
// Deletes `round`'s JOB and worker parts, and its directory once empty (the servers delete
// their slice files themselves).
void remove_job_round(const std::string& dir, std::uint64_t round);

}  // namespace psrt::ps
