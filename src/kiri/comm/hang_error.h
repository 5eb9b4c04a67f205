#pragma once
// The kCommTimeout error of an operation that did not complete in time, with the ranks that
// did not answer its diagnosis (comm/diagnosis.h): dead, stuck outside communication, or
// cut off by the network. comm knows ranks only; the layers above turn them into hosts
// (train: "Unreachable: host kc-h1 (rank 1)"; kiri launch: which host to leave out).
#include <string>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::comm {

class HangError : public Error {
 public:
  HangError(const std::string& message, std::vector<int> missing_world_ranks, const char* file,
            int line)
      : Error(ErrorKind::kCommTimeout, message, file, line),
        missing_(std::move(missing_world_ranks)) {}
  // World ranks of the group that did not answer, ascending; empty when all answered.
  const std::vector<int>& missing_world_ranks() const { return missing_; }

 private:
  std::vector<int> missing_;
};

}  // namespace kiri::comm
