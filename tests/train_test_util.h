#pragma once
// Helpers shared by the multi-rank trainer tests (zero/, pipeline/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

// name -> fp32 values of the whole model, on rank 0 (empty elsewhere).
inline std::map<std::string, std::vector<float>> params_of(Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, v] : t.gather_model()) {
    const float* d = v.data<float>();
    out[name].assign(d, d + v.numel());
  }
  return out;
}

// Largest |a - b| over every parameter; a parameter missing from b fails.
inline double max_abs_diff(const std::map<std::string, std::vector<float>>& a,
                           const std::map<std::string, std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (const auto& [name, va] : a) {
    const auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    EXPECT_EQ(va.size(), it->second.size()) << name;
    for (size_t i = 0; i < va.size() && i < it->second.size(); ++i)
      m = std::max(m, static_cast<double>(std::fabs(va[i] - it->second[i])));
  }
  return m;
}

// One folder for all ranks (MPI ranks are processes: rank 0's pid names it).
inline std::string shared_temp_dir(comm::Communicator& world, const std::string& name) {
  Allocator alloc;
  Tensor pid = Tensor::empty({1}, DType::kI32, Category::kOther, alloc);
  pid.data<int32_t>()[0] = static_cast<int32_t>(::getpid());
  world.broadcast(pid, 0);
  return std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/kiri_" + name +
         "_" + std::to_string(world.size()) + "_" + std::to_string(pid.data<int32_t>()[0]);
}

}  // namespace kiri::train
