// A program that ends normally leaves its job. Every joined Worker is listed here until it shuts
// down; at exit (std::atexit: a return from main or exit(), whatever the status) the ones still
// listed shut down, so the scheduler sees them unregister instead of vanish. A crash, a kill or
// _exit() runs no exit handler: such a worker is still lost, and the job says so.
#pragma once

#include "psrt/psrt.h"

namespace psrt::ps {

// Lists `w` (a joined worker); the first call installs the exit handler.
void leave_at_exit(Worker::Impl* w);
// Takes `w` off the list (it shuts down now). Idempotent.
void forget_at_exit(Worker::Impl* w);

}  // namespace psrt::ps
