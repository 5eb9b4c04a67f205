#include "kiri/parallel/mesh.h"

namespace kiri::parallel {

std::string MeshShape::str() const {
  return kiri::str("dp ", dp, " x tp ", tp, " x pp ", pp);
}

void validate_layout(const MeshShape& s, const LayoutFacts& f) {
  KIRI_CHECK_KIND(kConfig, s.dp >= 1 && s.tp >= 1 && s.pp >= 1,
                  "parallel degrees must be >= 1, got ", s.str());
  KIRI_CHECK_KIND(kConfig, s.world() == f.world_size, "parallel.dp x tp x pp = ", s.dp, " x ", s.tp,
                  " x ", s.pp, " = ", s.world(), " but the world has ", f.world_size,
                  " process(es)",
                  f.world_size == 1 ? " (start the ranks with kiri launch -n N)" : "");
  KIRI_CHECK_KIND(kConfig, f.n_head % s.tp == 0, "parallel.tp = ", s.tp,
                  " must divide model.n_head = ", f.n_head);
  KIRI_CHECK_KIND(kConfig, s.pp <= f.n_layer, "parallel.pp = ", s.pp,
                  " exceeds model.n_layer = ", f.n_layer, " (each stage needs a layer)");
  KIRI_CHECK_KIND(kConfig, f.micro_batch >= 1, "train.micro_batch must be >= 1");
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
