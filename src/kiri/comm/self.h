#pragma once
// A group of one rank: every collective is an identity (or a copy), done at
// once. A single process trains through the same code path as a world of N.
#include <memory>

#include "kiri/comm/communicator.h"

namespace kiri::comm {

std::unique_ptr<Communicator> self_communicator(const std::string& name = "world",
                                                Options options = {});

}  // namespace kiri::comm
