// A peer process for the conformance suite's kill tests:
//   transport_test_peer <backend>[+secure] source <address>   connect and stream 64 MiB messages
//   transport_test_peer <backend> sink <address>     connect and receive whatever comes
//   transport_test_peer <backend> stall <address>    connect, then never take a payload in
// Either way it prints "CONNECTED" once connected and stops by itself after 60 s.
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace psrt;
using namespace psrt::transport;

namespace {

class Sink final : public Receiver {
 public:
  explicit Sink(bool stall) : stall_(stall) {}
  Placement place(Connection&, std::span<const std::byte>, std::size_t size) override {
    // Holding the progress thread here keeps every later payload outstanding at the sender.
    if (stall_) std::this_thread::sleep_for(std::chrono::seconds(60));
    if (buf_.size() < size) buf_.resize(size);
    return Placement{{buf_.data(), size}};
  }
  void on_message(Connection&, std::span<const std::byte>, const Placement&) override {}
  void on_closed(Connection&, const Status&) override { std::_Exit(0); }

 private:
  std::vector<std::byte> buf_;
  bool stall_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <backend> source|sink <address>\n", argv[0]);
    return 2;
  }
  std::string mode = argv[2];
  auto rx = std::make_shared<Sink>(mode == "stall");
  auto t = testing::create_for_test(argv[1], rx);
  auto conn = t->connect(argv[3]);
  std::printf("CONNECTED\n");
  std::fflush(stdout);
  auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  if (mode == "source") {
    std::vector<std::byte> payload(64u << 20, std::byte{7});
    ConstBuffer b{payload.data(), payload.size()};
    std::string header = "stream";
    while (std::chrono::steady_clock::now() < stop && conn->is_open()) {
      std::promise<void> done;
      conn->send({reinterpret_cast<const std::byte*>(header.data()), header.size()},
                 std::span<const ConstBuffer>(&b, 1), [&](const Status&) { done.set_value(); });
      done.get_future().wait();
    }
  } else {
    while (std::chrono::steady_clock::now() < stop && conn->is_open()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return 0;
}
