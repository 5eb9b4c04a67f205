#include "kiri/parallel/mesh.h"

namespace kiri::parallel {

std::string MeshShape::str() const {
  return kiri::str("dp ", dp, " x tp ", tp, " x pp ", pp);
}

Mesh::Mesh(comm::Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) {
  KIRI_CHECK_KIND(kConfig, shape.world() == world.size(), "mesh ", shape.str(), " needs ",
                  shape.world(), " ranks, the world has ", world.size());
  const int r = world.rank();
  tp_index_ = r % shape.tp;
  dp_index_ = (r / shape.tp) % shape.dp;
  pp_index_ = r / (shape.tp * shape.dp);
  // Ranks with equal color share a group; the key orders them by their index in it.
  dp_ = world.split(pp_index_ * shape.tp + tp_index_, dp_index_, "dp");
  tp_ = world.split(pp_index_ * shape.dp + dp_index_, tp_index_, "tp");
  pp_ = world.split(dp_index_ * shape.tp + tp_index_, pp_index_, "pp");
}

std::string Mesh::coordinates() const {
  return str("rank ", rank(), " = (dp ", dp_index_, ", tp ", tp_index_, ", pp ", pp_index_, ")");
}

}  // namespace kiri::parallel
