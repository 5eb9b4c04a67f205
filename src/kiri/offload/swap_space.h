#pragma once
// One rank's swap files: the NVMe tier of the training state.
//
// A SwapSpace is a folder (<offload.path>/rank<RRRRR>) locked by this process
// (flock on its .lock: a second run with the same path is a kConfig error naming
// the folder, never two runs writing the same files). Files are named by the
// caller, stably: (unit, state), e.g. unit00012.exp_avg.swp, so a resumed run
// finds the same names. Each file is preallocated at creation (posix_fallocate),
// so a full disk is a kIo error when the run starts, before any parameter is
// changed, and never in the middle of a step.
//
// Reads and writes go through an AsyncIo engine with O_DIRECT (the page cache
// does not quietly keep what was offloaded; a filesystem without O_DIRECT, e.g.
// tmpfs, is used buffered with a warning). Every block of block_size bytes is
// checksummed (XXH3-64) when it is written and checked when it is read back: a
// truncated, bit-flipped or deleted file, or a block read before it was ever
// written, is a kIo error naming the file and the block, never wrong weights.
// check_files() finds a deleted or truncated file without reading it.
//
// The files are removed when the SwapSpace is destroyed, unless keep_files():
// the trainer keeps them when it stops on an error (a resumed run rewrites them
// from its checkpoint and reuses them).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiri/offload/async_io.h"
#include "kiri/tensor/allocator.h"

namespace kiri::offload {

struct SwapOptions {
  std::string dir;  // this rank's folder
  IoOptions io;
};

class SwapSpace {
 public:
  using Ticket = AsyncIo::Ticket;
  // Creates and locks `dir`. Bytes of the files are accounted on `accounting`
  // as Tier::kNvme of their category.
  SwapSpace(const SwapOptions& options, Allocator& accounting);
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // A file dir/<name> holding `bytes` (its length on disk rounded up to 4 KiB),
  // preallocated. Returns its id. A file of that name from an earlier run is
  // reused (truncated to the size and rewritten before it is read).
  int create(const std::string& name, int64_t bytes, Category category);

  // Asynchronous transfers of [offset, offset + bytes) of a file: offset a
  // multiple of block_size(); bytes a multiple of it too, or ending at the file's
  // end; buf 4 KiB-aligned with room for bytes rounded up to 4 KiB. A write
  // computes the blocks' checksums before it starts (buf must not change until
  // wait); wait on a read checks them.
  Ticket read(int file, int64_t offset, void* buf, int64_t bytes);
  Ticket write(int file, int64_t offset, const void* buf, int64_t bytes);
  // Blocks until done; kIo naming the file, offset and errno, a short transfer, or a
  // block whose checksum does not match (or that was never written).
  void wait(Ticket ticket);
  // Whether wait(ticket) would not block (its transfer is done); checks nothing.
  bool ready(Ticket ticket) const;

  // kIo when a file was deleted, replaced or truncated since it was created.
  void check_files() const;
  void keep_files(bool keep) { keep_ = keep; }

  int64_t block_size() const { return options_.io.block_size; }
  const std::string& dir() const { return options_.dir; }
  const std::string& path(int file) const;
  int64_t size(int file) const;
  const char* engine_name() const { return io_->name(); }
  bool direct() const { return direct_; }  // O_DIRECT in use
  // Bytes read and written since construction.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_written() const { return bytes_written_; }
  // Seconds spent blocked in wait(): the I/O the overlap did not hide.
  double wait_seconds() const { return wait_s_; }

 private:
  struct File;
  struct Pending;
  SwapOptions options_;
  Allocator& accounting_;
  std::unique_ptr<AsyncIo> io_;
  int lock_fd_ = -1;
  bool direct_ = true;
  bool keep_ = false;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<std::unique_ptr<Pending>> pending_;
  int64_t bytes_read_ = 0, bytes_written_ = 0;
  double wait_s_ = 0;
};

// One buffer of `bytes` (rounded up to 4 KiB), 4 KiB-aligned for O_DIRECT,
// accounted on `allocator` as `category`.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(int64_t bytes, Category category, Allocator& allocator);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Category category_ = Category::kBuffers;
  std::shared_ptr<AllocatorCore> core_;
};

}  // namespace kiri::offload
