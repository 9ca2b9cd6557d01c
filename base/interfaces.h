// Which local address a process listens on and advertises to the other hosts of a job.
//
// A role advertises the address of one of this host's interfaces, chosen by a spec
// (psrun --interface / PSRT_INTERFACE):
//   - ""            the interface whose route reaches the peer (the scheduler): the kernel's own
//                   choice of source address for a datagram to it (a connected UDP socket; no
//                   packet is sent). A loopback peer gives the loopback address; a peer on
//                   another host never does, so a job never advertises 127.0.0.1 to it.
//   - "eth0"        that interface's first address (IPv4 before IPv6, link-local IPv6 skipped)
//   - "10.9.0.0/24" the first address of any interface inside that network (IPv4 or IPv6)
// Hostnames resolve (getaddrinfo); IPv6 addresses are written bare ("fd09::1") and in brackets
// when joined with a port ("[fd09::1]:9000", join_host_port).
#pragma once

#include <string>
#include <vector>

namespace psrt {

struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // "10.9.0.12", "fd09::12"
  int family = 0;       // AF_INET or AF_INET6
  int prefix = 0;       // netmask length
};

// Every address of every interface that is up, in getifaddrs order.
std::vector<InterfaceAddress> local_interfaces();

// The source address the kernel picks to reach `host` (a name or an address), and the interface
// that holds it. Throws psrt::Error (kInvalidArgument: `host` does not resolve; kConnectionClosed:
// no route to it) naming `host`.
InterfaceAddress route_to(const std::string& host);

// The address to listen on and advertise: per `spec` as above, the route to `peer_host` when
// `spec` is empty. Throws psrt::Error (kInvalidArgument) naming the spec and listing this host's
// interfaces when nothing matches.
InterfaceAddress choose_address(const std::string& spec, const std::string& peer_host);

// "interface eth0 (10.9.0.12)": where this host's traffic to `host` leaves, for the message of a
// failed connection; "no route to it (...)" / "it does not resolve (...)" when there is none.
std::string describe_route(const std::string& host);

// "10.0.0.1:9000", "[fd09::1]:9000".
std::string join_host_port(const std::string& host, int port);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

// "lo 127.0.0.1/8, eth0 10.9.0.12/24, eth0 fd09::12/64": for error messages.
std::string describe_interfaces();

}  // namespace psrt
