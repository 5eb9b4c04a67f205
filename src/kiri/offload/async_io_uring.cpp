// io_uring engine: placeholder until the io_uring engine lands (returns nullptr, so
// make_async_io falls back to the thread pool under engine = auto).
#include "kiri/offload/async_io.h"

namespace kiri::offload {

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions&) {
  return nullptr;
}

}  // namespace kiri::offload
