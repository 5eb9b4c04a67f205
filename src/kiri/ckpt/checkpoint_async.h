#pragma once
// Asynchronous checkpoints (checkpoint.async = true; docs/checkpoints.md, "Asynchronous
// saves"). The trainer stops only to copy what this rank writes into staging buffers (the
// optimizer's m and v on the ranks that write optimizer files, the whole fp32 model on rank
// 0), counted in the `buffers` category and reused by every later save; a background thread
// per rank then writes the files into the save's temporary step directory. Each file
// appears under its final name only complete and fsynced (write_file_atomic), so rank 0's
// thread, once its own files are written, waits until every optimizer file of the save is
// there, writes state.json and commits the directory (latest moves, keep_last prunes). No
// collective runs off the main thread: the ranks meet on the shared checkpoint folder.
//
// A failed write leaves the temporary directory (removed at the next start) and `latest`
// as they were; the failure is raised by the main thread at its next step (rethrow_failure)
// or save (wait). A save waits for the previous one to finish.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/config/gpt_config.h"
#include "kiri/data/tokenizer.h"
#include "kiri/tensor/tensor.h"

namespace kiri::ckpt {

// What one rank's background thread writes for one save. Everything is a copy: the thread
// reads nothing of the trainer's but the staging buffers and the tokenizer (const).
struct AsyncSaveJob {
  std::string root;  // checkpoint.dir
  int64_t step = 0;
  std::string tmp;  // the step's temporary directory (begin_checkpoint's)
  int rank = 0;     // world rank, for messages and the log
  double timeout_s = 300;
  int keep_last = 0;
  // Ranks that write optimizer files: file name, metadata; the states are staging m, v.
  std::string optimizer_file;  // "" when this rank writes none
  std::map<std::string, std::string> optimizer_metadata;
  int64_t state_numel = 0;
  // Rank 0: the model folder, the names of every optimizer file to wait for, state.json.
  bool writes_model = false;
  std::vector<ckpt::TensorSpec> model_specs;  // in staging order
  int64_t max_shard_bytes = 0;
  kiri::GPTConfig model;
  std::string tokenizer_name;
  const data::Tokenizer* tokenizer = nullptr;
  std::vector<std::string> optimizer_files;
  std::string state_json;
  // For the log: how long the save stopped training, and of that how long it waited for
  // the previous save.
  double stall_s = 0, waited_s = 0;
  // Test hook (KIRI_FAULT=slowsave:R:MS): sleep this long before each file it writes.
  int slow_ms = 0;
};

// One rank's background writer and its staging buffers (Category::kBuffers).
class AsyncCheckpointWriter {
 public:
  explicit AsyncCheckpointWriter(Allocator& allocator) : allocator_(allocator) {}
  ~AsyncCheckpointWriter();  // cancels a save in flight and joins its thread
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // The staging buffers, grown when a save needs more (never shrunk: reused by every save).
  Tensor& model_staging(int64_t numel);   // [numel] F32
  Tensor& states_staging(int64_t numel);  // [2 x numel] F32: m, then v
  // Starts the thread for `job` (the previous save must be finished: wait() first).
  void start(AsyncSaveJob job);
  // Blocks until the save in flight (if any) is done; raises its failure (once).
  void wait();
  // Raises the failure of a finished save (once); returns at once otherwise.
  void rethrow_failure();
  bool busy() const { return running_.load(); }

 private:
  void run() noexcept;
  void write_files();
  void write_optimizer_file();
  void write_model_folder();
  void await_optimizer_files();  // rank 0: every rank's file is in tmp (or one failed)
  void commit();
  void pause_for_test() const;

  Allocator& allocator_;
  Tensor model_, states_;
  AsyncSaveJob job_;
  std::thread thread_;
  std::atomic<bool> running_{false}, cancel_{false};
  std::mutex mutex_;
  Timer started_;  // the thread's start, for the log
  std::optional<ErrorKind> failed_kind_;
  std::string failed_message_;
};

// The marker a rank's writer leaves in the temporary directory when its file fails, so that
// rank 0 stops waiting for it: ".<file>.failed" holding the message.
std::string failed_marker(const std::string& tmp, const std::string& file);

}  // namespace kiri::ckpt
