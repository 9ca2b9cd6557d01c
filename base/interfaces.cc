#include "base/interfaces.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "psrt/error.h"

namespace psrt {
namespace {

std::string to_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

int prefix_of(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const unsigned char* p;
  std::size_t n;
  if (mask->sa_family == AF_INET) {
    p = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else {
    p = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  }
  int bits = 0;
  for (std::size_t i = 0; i < n; ++i)
    bits += __builtin_popcount(p[i]);
  return bits;
}

// `text` as raw bytes (4 or 16) of the given family; false when it is not such an address.
bool to_bytes(const std::string& text, int family, unsigned char* out) {
  return ::inet_pton(family, text.c_str(), out) == 1;
}

bool in_network(const InterfaceAddress& a, const std::string& net, int bits) {
  unsigned char want[16], have[16];
  if (!to_bytes(net, a.family, want) || !to_bytes(a.address, a.family, have)) return false;
  for (int i = 0; i < bits; ++i) {
    const int mask = 0x80 >> (i % 8);
    if ((want[i / 8] & mask) != (have[i / 8] & mask)) return false;
  }
  return true;
}

bool link_local6(const InterfaceAddress& a) {
  return a.family == AF_INET6 && a.address.rfind("fe80", 0) == 0;
}

Error no_match(const std::string& spec, const char* what) {
  return Error(ErrorCode::kInvalidArgument,
               fmt::format("interface '{}' (--interface / PSRT_INTERFACE): {}; this host has: {}",
                           spec, what, describe_interfaces()));
}

InterfaceAddress by_network(const std::string& spec) {
  const auto slash = spec.find('/');
  const std::string net = spec.substr(0, slash);
  int bits = -1;
  try {
    bits = std::stoi(spec.substr(slash + 1));
  } catch (...) {
  }
  unsigned char probe[16];
  const int family = to_bytes(net, AF_INET, probe) ? AF_INET : AF_INET6;
  if (!to_bytes(net, family, probe) || bits < 0 || bits > (family == AF_INET ? 32 : 128))
    throw no_match(spec, "not a network (expected e.g. 10.0.0.0/24 or fd00::/64)");
  for (const auto& a : local_interfaces())
    if (a.family == family && in_network(a, net, bits)) return a;
  throw no_match(spec, "no interface has an address in that network");
}

InterfaceAddress by_name(const std::string& spec) {
  const InterfaceAddress* v6 = nullptr;
  const auto all = local_interfaces();
  for (const auto& a : all) {
    if (a.name != spec) continue;
    if (a.family == AF_INET) return a;
    if (v6 == nullptr && !link_local6(a)) v6 = &a;
  }
  if (v6 != nullptr) return *v6;
  throw no_match(spec, "no such interface with an address, or it is down");
}

}  // namespace

std::vector<InterfaceAddress> local_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw Error(ErrorCode::kSystem, fmt::format("getifaddrs: {}", std::strerror(errno)));
  std::vector<InterfaceAddress> out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back({i->ifa_name, to_text(i->ifa_addr), family, prefix_of(i->ifa_netmask)});
  }
  ::freeifaddrs(list);
  return out;
}

InterfaceAddress route_to(const std::string& host) {
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']')
    name = name.substr(1, name.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(name.c_str(), "9", &hints, &res); rc != 0 || res == nullptr)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("cannot resolve host '{}': {}", host, ::gai_strerror(rc)));
  std::string error;
  InterfaceAddress found;
  for (addrinfo* r = res; r != nullptr && found.address.empty(); r = r->ai_next) {
    const int fd = ::socket(r->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(fd, r->ai_addr, r->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0)
      found.address = to_text(reinterpret_cast<sockaddr*>(&local)), found.family = r->ai_family;
    else
      error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (found.address.empty())
    throw Error(ErrorCode::kConnectionClosed,
                fmt::format("no route from this host to '{}': {}", host, error));
  for (const auto& a : local_interfaces())
    if (a.address == found.address) return a;
  return found;  // e.g. an address the kernel chose but getifaddrs did not list
}

InterfaceAddress choose_address(const std::string& spec, const std::string& peer_host) {
  if (spec.empty()) return route_to(peer_host);
  if (spec.find('/') != std::string::npos) return by_network(spec);
  return by_name(spec);
}

std::string describe_route(const std::string& host) {
  try {
    const InterfaceAddress a = route_to(host);
    return fmt::format("interface {} ({})", a.name.empty() ? "?" : a.name, a.address);
  } catch (const Error& e) {
    return fmt::format("no interface: {}", e.what());
  }
}

std::string join_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[')
    return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  unsigned char b[4];
  return to_bytes(host, AF_INET, b) && b[0] == 127;
}

std::string describe_interfaces() {
  std::string out;
  for (const auto& a : local_interfaces())
    out += fmt::format("{}{} {}/{}", out.empty() ? "" : ", ", a.name, a.address, a.prefix);
  return out.empty() ? "no interface that is up" : out;
}

}  // namespace psrt
