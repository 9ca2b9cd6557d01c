// The body of the sealed-framing fuzz target (transport/secure): what an attacker on the wire
// can do to a secure connection after its handshake. Callable without libFuzzer, so that
// secure_fuzz_corpus_test runs it over the seeds with any compiler.
//
// One input is a script of operations on a connection between two secure contexts, A (the
// sender) and B (the receiver), whose backend is played by the harness: A seals messages, and
// the harness hands B each sealed frame as is, with a byte flipped, with its payload cut or
// lengthened, twice, out of order, never, or bytes of the input's own as a frame. Throughout, what
// B hands its receiver must be A's messages, each whole and at most once, in the order A sent
// them; a broken invariant aborts (a libFuzzer crash).
//
//   op byte % 8, then its arguments (missing bytes read as 0):
//   0 SEND     header length (1 + b % 64), payload class (b % 4: none, 1..4096 bytes, 256 KiB + x
//              (2 segments), 512 KiB + x (4 segments); x and the small size from 2 more
//              bytes; from the third payload of 256 KiB or more on, a small one instead)
//   1 DELIVER  the oldest frame in flight, as sealed
//   2 FLIP     the oldest frame with byte (3 bytes, mod its length) xor (1 byte, 0 read as 1)
//   3 REPLAY   a frame already handed on or dropped (1 byte: which)
//   4 DROP     the oldest frame
//   5 RAW      a frame of the input's bytes: header length (b % 257), payload length (2 bytes
//              % 8193), then the bytes themselves
//   6 RESIZE   the oldest frame with its payload cut or zero-extended by (2 bytes, signed)
//   7 SWAP     the two oldest frames change places
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace psrt::transport::secure::fuzz {

// What one input did: "delivered=D dropped=R open" (or "closed"): D messages B handed its
// receiver, R messages B dropped as forged or replayed, and whether the connection survived.
std::string run_one(std::span<const std::byte> input);

}  // namespace psrt::transport::secure::fuzz
