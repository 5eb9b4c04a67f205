#include "kiri/launch/world.h"

#include <cstdlib>
#include <string>

#include "kiri/base/log.h"
#include "kiri/comm/self.h"

namespace kiri::launch {

namespace {
// The first of the variables that is set and holds a non-negative integer; -1 if none.
int from_env(std::initializer_list<const char*> vars) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= 0) return static_cast<int>(x);
  }
  return -1;
}
}  // namespace

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

int job_rank() {
  if (log::rank() >= 0) return log::rank();  // the world exists (or existed)
  return from_env({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"});
}

int job_size() {
  const int n = from_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
  return n >= 1 ? n : 1;
}

}  // namespace kiri::launch
