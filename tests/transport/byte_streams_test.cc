// Which jobs' messages travel as TCP byte streams (transport/byte_streams.h): those get the
// pipelined balanced cut and PSRT_SEND_WINDOW=auto's window; RDMA and shared memory do not.
#include "transport/byte_streams.h"

#include <gtest/gtest.h>

namespace psrt::transport {
namespace {

TEST(ByteStreams, TcpAlwaysAndUcxOnlyWhenUcxTlsNamesTcpAndNoRdma) {
  EXPECT_TRUE(moves_as_byte_streams("tcp", ""));
  EXPECT_TRUE(moves_as_byte_streams("tcp", "rc"));  // UCX_TLS means nothing to tcp
  EXPECT_TRUE(moves_as_byte_streams("ucx", "tcp"));
  EXPECT_TRUE(moves_as_byte_streams("ucx", "tcp,self"));
  EXPECT_TRUE(moves_as_byte_streams("ucx", "sm,self,tcp"));
  EXPECT_TRUE(moves_as_byte_streams("ucx", "posix,sysv,cma,tcp,cuda_copy,cuda_ipc"));
  EXPECT_TRUE(moves_as_byte_streams("ucx", "tcp,"));  // an empty entry names nothing
}

TEST(ByteStreams, UcxWithItsDefaultRdmaOrAnUnknownListIsNot) {
  EXPECT_FALSE(moves_as_byte_streams("ucx", ""));  // unset: UCX's default, all transports
  EXPECT_FALSE(moves_as_byte_streams("ucx", "all"));
  EXPECT_FALSE(moves_as_byte_streams("ucx", "rc,tcp"));
  EXPECT_FALSE(moves_as_byte_streams("ucx", "tcp,ud_x"));
  EXPECT_FALSE(moves_as_byte_streams("ucx", "dc_mlx5,sm,tcp"));
  EXPECT_FALSE(moves_as_byte_streams("ucx", "ib"));
  EXPECT_FALSE(moves_as_byte_streams("ucx", "^rc,ud"));   // an exclusion list keeps the rest
  EXPECT_FALSE(moves_as_byte_streams("ucx", "sm,self"));  // no network transport at all
  EXPECT_FALSE(moves_as_byte_streams("ucx", "tcpx"));     // no such transport: not tcp
  EXPECT_FALSE(moves_as_byte_streams("inproc", "tcp"));
}

}  // namespace
}  // namespace psrt::transport
