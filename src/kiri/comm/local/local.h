#pragma once
// The local backend: ranks as threads of one process, exchanging through
// shared memory, so the same test bodies run fast under plain ctest.
#include <functional>

#include "kiri/comm/communicator.h"

namespace kiri::comm {

// Starts world_size threads; thread r runs body with its own Communicator
// (rank r of world_size, name "world") and log::set_rank(r). Joins them all
// and rethrows the first exception, its message prefixed with the rank.
// Once one rank throws, the others' pending and later operations raise
// kCommAborted naming it, within milliseconds rather than at the timeout.
void run_local(int world_size, const std::function<void(Communicator& world)>& body,
               Options options = {});

}  // namespace kiri::comm
