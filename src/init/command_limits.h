// Buffer bounds shared by everything in init that runs a command and streams its output.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bulkhead::init {

// Output is read in chunks of this size, and only while the connection's outgoing buffer has
// room for a whole chunk: the buffer never holds more than kOutgoingLimit.
constexpr size_t kOutputChunk = 64 * 1024;
constexpr size_t kOutgoingLimit = 256 * 1024;
// The connection is not read while this much stdin waits for the command to take it.
constexpr size_t kStdinLimit = 256 * 1024;
// How long init keeps reading output after the command exited while a descendant holds it open.
constexpr uint64_t kOutputGraceMs = 100;

}  // namespace bulkhead::init
