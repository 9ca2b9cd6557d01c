#include <gtest/gtest.h>

#include "psrt/error.h"
#include "transport/socket.h"

namespace psrt::transport {
namespace {

TEST(ParseAddress, SplitsHostAndPort) {
  auto hp = parse_address("127.0.0.1:9100");
  EXPECT_EQ(hp.host, "127.0.0.1");
  EXPECT_EQ(hp.port, 9100);
  EXPECT_EQ(parse_address(":0").host, "");
  EXPECT_EQ(parse_address("node-3.cluster:65535").port, 65535);
}

TEST(ParseAddress, RejectsWithTheExpectedForm) {
  for (const char* bad : {"127.0.0.1", "host:", "host:abc", "host:70000", "host:-1", "h:1x"}) {
    try {
      parse_address(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("HOST:PORT"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(ListenTcp, ReportsTheChosenPort) {
  std::string bound;
  Fd fd = listen_tcp("127.0.0.1:0", bound);
  EXPECT_TRUE(fd);
  auto hp = parse_address(bound);
  EXPECT_EQ(hp.host, "127.0.0.1");
  EXPECT_GT(hp.port, 0);
  std::string again;
  EXPECT_THROW(listen_tcp(bound, again), Error) << "the port is taken";
}

}  // namespace
}  // namespace psrt::transport
