// Whether a job's messages between hosts travel as TCP byte streams: over the tcp transport, and
// over ucx when UCX_TLS names tcp and no RDMA transport (UCX's tcp transport on an Ethernet
// without RDMA, as in perf/vs_ddp/). On such links a message holds its connection until its
// last byte is out and the kernel queues whatever is written, so the balanced cut pipelines its
// slices (ps::job_cut) and a worker bounds what it has in flight to each server
// (PSRT_SEND_WINDOW=auto). Over RDMA or shared memory (UCX_TLS unset: UCX picks them where they
// exist) large messages move best whole and unthrottled.
#pragma once

#include <string_view>

namespace psrt::transport {

// `ucx_tls` is UCX_TLS as set ("" = unset, UCX's default "all"). A list that excludes
// ("^rc,ud") or names anything beyond tcp and the host-local transports (self, sm/shm, posix,
// sysv, mm, cma, knem, xpmem, cuda_copy, cuda_ipc, rocm_copy, rocm_ipc) counts as RDMA-capable.
bool moves_as_byte_streams(std::string_view transport, std::string_view ucx_tls);
// The same, with UCX_TLS from this process's environment.
bool moves_as_byte_streams(std::string_view transport);

}  // namespace psrt::transport
