#pragma once
// The device mesh: world = dp x tp x pp ranks, tp innermost, then dp, then pp
// (Megatron-LM's order, so tensor-parallel peers are neighbours):
//   rank = pp_index * (dp * tp) + dp_index * tp + tp_index
// Each rank knows its coordinates and holds a communicator per dimension.
// The layout is validated before (kiri::validate_layout, config/layout.h).
#include <memory>
#include <string>

#include "kiri/comm/communicator.h"

namespace kiri::parallel {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int world() const { return dp * tp * pp; }
  std::string str() const;  // "dp 2 x tp 1 x pp 1"
};

class Mesh {
 public:
  // Splits world into the dp, tp and pp groups (collective over world).
  Mesh(comm::Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_.rank(); }
  int dp_index() const { return dp_index_; }
  int tp_index() const { return tp_index_; }
  int pp_index() const { return pp_index_; }
  comm::Communicator& world() { return world_; }
  comm::Communicator& dp() { return *dp_; }
  comm::Communicator& tp() { return *tp_; }
  comm::Communicator& pp() { return *pp_; }
  std::string coordinates() const;  // "rank 3 = (dp 1, tp 1, pp 0)"

 private:
  comm::Communicator& world_;
  MeshShape shape_;
  int dp_index_, tp_index_, pp_index_;
  std::unique_ptr<comm::Communicator> dp_, tp_, pp_;
};

}  // namespace kiri::parallel
