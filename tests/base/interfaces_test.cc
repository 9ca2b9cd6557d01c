// base/interfaces.h (which address a role listens on and advertises), base/host.h's host id, and
// IPv6 in the socket plumbing, on this machine's own interfaces. The same rules across real
// (namespace) hosts: tests/multihost/.
#include "base/interfaces.h"

#include <gtest/gtest.h>

#include <string>

#include "base/host.h"
#include "psrt/error.h"
#include "transport/socket.h"

namespace psrt {
namespace {

bool has_ipv6_loopback() {
  for (const auto& a : local_interfaces())
    if (a.address == "::1") return true;
  return false;
}

TEST(Interfaces, TheRouteToLoopbackLeavesThroughLoopback) {
  const InterfaceAddress a = route_to("127.0.0.1");
  EXPECT_EQ(a.address, "127.0.0.1");
  EXPECT_EQ(a.name, "lo");
  EXPECT_EQ(route_to("localhost").name, "lo");
  EXPECT_EQ(choose_address("", "127.0.0.1").address, "127.0.0.1");
}

TEST(Interfaces, ANameOrACidrPicksThatInterfacesAddress) {
  EXPECT_EQ(choose_address("lo", "unused").address, "127.0.0.1");
  EXPECT_EQ(choose_address("127.0.0.0/8", "unused").address, "127.0.0.1");
  EXPECT_EQ(choose_address("127.0.0.0/8", "unused").name, "lo");
  if (has_ipv6_loopback()) {
    EXPECT_EQ(choose_address("::1/128", "unused").address, "::1");
  }
}

TEST(Interfaces, NothingMatchingIsAnErrorListingTheInterfaces) {
  // A network none of this machine's addresses is in (the loopback net, shifted out of 127/8).
  const std::string unused_net = "126.255.255.0/24";
  for (const auto& a : local_interfaces())
    ASSERT_NE(a.address.rfind("126.255.255.", 0), 0u) << "pick another network for this test";
  for (const std::string& spec :
       {std::string("nosuch0"), unused_net, std::string("10.0.0/33"), std::string("banana/8")}) {
    try {
      choose_address(spec, "127.0.0.1");
      ADD_FAILURE() << spec << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + spec + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("PSRT_INTERFACE"), std::string::npos) << what;
      EXPECT_NE(what.find("lo 127.0.0.1/8"), std::string::npos) << what;
    }
  }
}

TEST(Interfaces, AHostThatDoesNotResolveIsNamed) {
  try {
    route_to("no-such-host.invalid");
    ADD_FAILURE() << "resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no-such-host.invalid"), std::string::npos) << e.what();
  }
  EXPECT_NE(describe_route("no-such-host.invalid").find("no interface"), std::string::npos);
  EXPECT_EQ(describe_route("127.0.0.1"), "interface lo (127.0.0.1)");
}

TEST(Interfaces, Ipv6AddressesGoInBracketsWithAPort) {
  EXPECT_EQ(join_host_port("10.0.0.1", 9000), "10.0.0.1:9000");
  EXPECT_EQ(join_host_port("fd09::1", 9000), "[fd09::1]:9000");
  EXPECT_EQ(transport::parse_address("[fd09::1]:9000").host, "fd09::1");
  EXPECT_EQ(transport::parse_address("[fd09::1]:9000").port, 9000);
  EXPECT_TRUE(is_loopback("127.0.0.5"));
  EXPECT_TRUE(is_loopback("::1"));
  EXPECT_FALSE(is_loopback("10.9.0.1"));
}

TEST(Interfaces, TcpListensConnectsAndNamesPeersOverIpv6) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "no ::1 on this machine";
  std::string bound;
  transport::Fd listener = transport::listen_tcp("[::1]:0", bound);
  ASSERT_EQ(bound.rfind("[::1]:", 0), 0u) << bound;
  transport::Fd client = transport::connect_tcp(bound, std::chrono::seconds(2));
  std::string peer;
  transport::Fd accepted;
  for (int i = 0; i < 200 && !accepted; ++i, usleep(5000))
    accepted = transport::accept_tcp(listener.get(), peer);
  ASSERT_TRUE(accepted);
  EXPECT_EQ(peer.rfind("[::1]:", 0), 0u) << peer;
}

TEST(HostId, IsTheBootIdAndTheNetworkNamespace) {
  const std::string id = local_host_id();
  ASSERT_EQ(id.size(), 40u) << id;  // fits the UCX hello's 40-byte field
  std::string boot;
  for (char c : local_boot_id())
    if (c != '-') boot += c;
  EXPECT_EQ(id.substr(0, 32), boot);
  EXPECT_EQ(local_host_id(), id);
}

}  // namespace
}  // namespace psrt
