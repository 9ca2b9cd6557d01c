// psrun --timeline FILE: the job's timeline (ps/job_timeline.h) as one Chrome trace / Perfetto
// JSON file: a process per worker and server ("worker 0", "server 1"), a track per kind of
// event (send, reply, wait; receive, update, serve), every event with its key, slice and
// argument, timestamps in microseconds on the scheduler's clock from the first event. The
// clocks' uncertainty per process is in otherData.processes (perf/plot_timeline draws a round).
#pragma once

#include <string>

#include "ps/job_timeline.h"

namespace psrt::psrun {

// Writes `timeline` to `path`; throws psrt::Error naming the file when it cannot.
void write_timeline(const ps::JobTimeline& timeline, const std::string& path);

}  // namespace psrt::psrun
