// Sends one message to itself over the installed psrt's tcp transport and checks it arrived.
#include <cstdio>
#include <cstring>
#include <future>
#include <string>

#include "transport/factory.h"

using namespace psrt;

class Echo final : public transport::Receiver {
 public:
  transport::Placement place(transport::Connection&, std::span<const std::byte>,
                             std::size_t size) override {
    buf_.resize(size);
    return {{buf_.data(), size}};
  }
  void on_message(transport::Connection&, std::span<const std::byte> header,
                  const transport::Placement& p) override {
    got_.set_value(std::string(reinterpret_cast<const char*>(header.data()), header.size()) + ":" +
                   std::string(static_cast<const char*>(p.dest.data), p.dest.size));
  }
  void on_closed(transport::Connection&, const Status&) override {}
  std::promise<std::string> got_;

 private:
  std::string buf_;
};

int main() {
  auto rx = std::make_shared<Echo>();
  auto t = transport::create_transport("tcp", rx);
  auto conn = t->connect(t->listen("127.0.0.1:0"));
  std::string header = "hello", body = "psrt";
  ConstBuffer b{body.data(), body.size()};
  conn->send({reinterpret_cast<const std::byte*>(header.data()), header.size()}, {&b, 1},
             [](const Status&) {});
  std::string got = rx->got_.get_future().get();
  std::printf("%s\n", got.c_str());
  return got == "hello:psrt" ? 0 : 1;
}
