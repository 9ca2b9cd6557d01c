// Runs the sealed-framing fuzz body over scripted attacks (secure_fuzz.h) with any compiler and
// checks what each did; see corpus_runner.h for the arguments.
#include <initializer_list>
#include <string>

#include "tests/fuzz/corpus_runner.h"
#include "tests/fuzz/secure_fuzz.h"

namespace {

using psrt::fuzz::Bytes;
using psrt::fuzz::Inputs;
namespace sf = psrt::transport::secure::fuzz;

Bytes script(std::initializer_list<int> bytes) {
  Bytes b;
  for (int v : bytes)
    b.push_back(std::byte(static_cast<std::uint8_t>(v)));
  return b;
}

// Ops (secure_fuzz.h) with their arguments.
enum Op {
  kSend = 0,
  kDeliver = 1,
  kFlip = 2,
  kReplay = 3,
  kDrop = 4,
  kRaw = 5,
  kResize = 6,
  kSwap = 7
};
constexpr int kNone = 0, kSmall = 1, kTwoSegments = 2, kFourSegments = 3;

Inputs seeds() {
  Inputs s;
  // Honest traffic of every payload class arrives whole and in order.
  s["seed-honest"] = {
      script({kSend, 7,  kSmall,       100, 0, kDeliver, kSend, 0,  kNone,         0, 0, kDeliver,
              kSend, 63, kTwoSegments, 5,   0, kDeliver, kSend, 20, kFourSegments, 9, 1, kDeliver}),
      "delivered=4 dropped=0 open"};
  // A header altered on the way is dropped; the real message never comes, so the next one is out
  // of sequence and closes the connection.
  s["seed-flip-header"] = {
      script({kSend, 10, kSmall, 0, 1, kFlip, 12, 0, 0, 0x80, kSend, 10, kNone, 0, 0, kDeliver}),
      "delivered=0 dropped=1 closed"};
  // A payload altered in its second segment is dropped, and the real copy behind it delivered.
  s["seed-flip-payload-then-real"] = {script({kSend, 3, kTwoSegments, 0, 0, kFlip, 0x00, 0x40, 0x03,
                                              0x01, kReplay, 0, kSend, 3, kNone, 0, 0, kDeliver}),
                                      "delivered=2 dropped=1 open"};
  // A replay of a delivered message is dropped; the connection goes on.
  s["seed-replay"] = {
      script({kSend, 5, kSmall, 8, 0, kDeliver, kReplay, 0, kSend, 5, kSmall, 8, 0, kDeliver}),
      "delivered=2 dropped=1 open"};
  // A message lost on the way: the next is out of sequence.
  s["seed-drop"] = {script({kSend, 5, kNone, 0, 0, kSend, 5, kNone, 0, 0, kDrop, kDeliver}),
                    "delivered=0 dropped=0 closed"};
  // Two messages reordered.
  s["seed-swap"] = {
      script({kSend, 5, kSmall, 1, 0, kSend, 5, kSmall, 2, 0, kSwap, kDeliver, kDeliver}),
      "delivered=0 dropped=0 closed"};
  // Bytes that were never sealed, as a header alone and with a payload.
  s["seed-raw"] = {script({kRaw, 40, 0,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9,    10, 11, 12,
                           13,   14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,   26, 27, 28,
                           29,   30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, kRaw, 8,  16, 0}),
                   "delivered=0 dropped=2 open"};
  // A payload cut short or lengthened by the backend's frame: its length is in the header's tag.
  s["seed-resize"] = {script({kSend, 5, kSmall, 100, 0, kResize, 0xfb, 0xff, kSend, 5, kTwoSegments,
                              0, 0, kResize, 9, 0}),
                      "delivered=0 dropped=2 open"};
  return s;
}

Inputs malformed() {
  Inputs m;
  m["empty"] = {{}, "delivered=0 dropped=0 open"};
  m["nothing in flight"] = {script({kDeliver, kFlip, kDrop, kSwap, kReplay, kResize}),
                            "delivered=0 dropped=0 open"};
  m["a raw frame cut short by the input's end"] = {script({kRaw, 200, 0xff, 0xff}),
                                                   "delivered=0 dropped=1 open"};
  m["a payload grown by 32767 bytes"] = {script({kSend, 1, kSmall, 0, 0, kResize, 0xff, 0x7f}),
                                         "delivered=0 dropped=1 open"};
  m["a payload cut to nothing"] = {script({kSend, 1, kSmall, 9, 0, kResize, 0x00, 0x80}),
                                   "delivered=0 dropped=1 open"};
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  return psrt::fuzz::corpus_main(argc, argv, "secure_fuzz_corpus_test", seeds(), malformed(),
                                 [](std::span<const std::byte> in) { return sf::run_one(in); });
}
