#include "kiri/cli/world.h"

#include "kiri/base/log.h"
#include "kiri/comm/self.h"

namespace kiri::cli {

World make_world() {
  World w;
  if (comm::launched_by_mpi()) {
    w.mpi = std::make_unique<comm::MpiRuntime>();
    w.comm = comm::mpi_world();
    log::set_rank(w.comm->rank());
  } else {
    w.comm = comm::self_communicator();
  }
  return w;
}

}  // namespace kiri::cli
