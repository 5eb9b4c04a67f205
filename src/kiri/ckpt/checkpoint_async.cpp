#include "kiri/ckpt/checkpoint_async.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/hf/hf_model.h"

namespace kiri::ckpt {

namespace fs = std::filesystem;

namespace {
// How often rank 0's writer looks for the other ranks' files.
constexpr auto kPoll = std::chrono::milliseconds(2);

// Raised inside the thread when the trainer cancels the save (its destructor).
struct Cancelled {};

std::string file_error_text(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  try {
    return read_small_file(path, 1 << 16, ErrorKind::kIo, "failure marker");
  } catch (const Error&) {
    return "(unreadable)";
  }
}
}  // namespace

std::string failed_marker(const std::string& tmp, const std::string& file) {
  return tmp + "/." + file + ".failed";
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

Tensor& AsyncCheckpointWriter::model_staging(int64_t numel) {
  KIRI_CHECK(!running_, "model staging asked for while a save is being written");
  if (!model_.defined() || model_.numel() < numel)
    model_ = Tensor();  // the old one goes first: never both
  if (!model_.defined())
    model_ =
        Tensor::empty({std::max<int64_t>(numel, 1)}, DType::kF32, Category::kBuffers, allocator_);
  return model_;
}

Tensor& AsyncCheckpointWriter::states_staging(int64_t numel) {
  KIRI_CHECK(!running_, "state staging asked for while a save is being written");
  if (!states_.defined() || states_.numel() < 2 * numel) states_ = Tensor();
  if (!states_.defined())
    states_ = Tensor::empty({std::max<int64_t>(2 * numel, 1)}, DType::kF32, Category::kBuffers,
                            allocator_);
  return states_;
}

void AsyncCheckpointWriter::start(AsyncSaveJob job) {
  KIRI_CHECK(!running_ && !thread_.joinable(), "a save of step ", job_.step,
             " is still being written (wait() first)");
  job_ = std::move(job);
  cancel_ = false;
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

void AsyncCheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  rethrow_failure();
}

void AsyncCheckpointWriter::rethrow_failure() {
  if (running_) return;
  if (thread_.joinable()) thread_.join();  // finished: collect it
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_kind_) return;
  const ErrorKind kind = *failed_kind_;
  failed_kind_.reset();
  raise(kind, failed_message_, __FILE__, __LINE__);
}

void AsyncCheckpointWriter::run() noexcept {
  log::set_rank(job_.rank);
  started_.reset();
  try {
    write_files();
  } catch (const Cancelled&) {
    // The trainer is going away (an error elsewhere): the temporary directory stays, as a
    // killed save's does, and the next run removes it.
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_kind_ = e.kind();
    failed_message_ = e.message();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_kind_ = ErrorKind::kIo;
    failed_message_ = e.what();
  }
  if (failed_kind_ && !job_.optimizer_file.empty()) {
    // Tell rank 0 to stop waiting for this file (best effort: the disk may be full).
    try {
      write_file_atomic(failed_marker(job_.tmp, job_.optimizer_file), failed_message_);
    } catch (const std::exception&) {
    }
  }
  if (failed_kind_)
    failed_message_ = str("the asynchronous checkpoint of step ", job_.step, " failed on rank ",
                          job_.rank, ": ", failed_message_, "; ", job_.tmp,
                          " was not committed, and latest still names the previous checkpoint");
  running_ = false;
}

void AsyncCheckpointWriter::pause_for_test() const {
  for (int i = 0; i < job_.slow_ms && !cancel_; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (cancel_) throw Cancelled{};
}

void AsyncCheckpointWriter::write_files() {
  if (!job_.optimizer_file.empty()) write_optimizer_file();
  if (!job_.writes_model) return;
  write_model_folder();
  await_optimizer_files();
  commit();
}

void AsyncCheckpointWriter::write_optimizer_file() {
  const int64_t n = job_.state_numel;
  const std::vector<ckpt::TensorSpec> specs = {{"exp_avg", DType::kF32, Shape({n})},
                                               {"exp_avg_sq", DType::kF32, Shape({n})}};
  const char* base = static_cast<const char*>(states_.raw());
  pause_for_test();
  ckpt::save_safetensors_streaming(
      job_.tmp + "/" + job_.optimizer_file, specs, job_.optimizer_metadata,
      [&](size_t k, const ckpt::AppendBytes& append) {
        if (cancel_) throw Cancelled{};
        append(base + k * n * sizeof(float), n * sizeof(float));
      },
      ckpt::Checksums::kXxh3);
}

void AsyncCheckpointWriter::write_model_folder() {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const ckpt::TensorSpec& s : job_.model_specs) {
    offsets.push_back(at);
    at += s.shape.numel();
  }
  const float* base = static_cast<const float*>(model_.raw());
  pause_for_test();
  hf::write_hf_weights_streaming(job_.tmp, job_.model_specs, job_.max_shard_bytes,
                                 [&](size_t k, const ckpt::AppendBytes& append) {
                                   if (cancel_) throw Cancelled{};
                                   append(base + offsets[k], job_.model_specs[k].nbytes());
                                 },
                                 {{ckpt::kStepMetadataKey, std::to_string(job_.step)}});
  hf::write_hf_tokenizer(job_.tmp, *job_.tokenizer, job_.model.block_size);
  write_file_atomic(job_.tmp + "/config.json",
                    hf::hf_config_json(job_.model, job_.tokenizer->eot_token(), DType::kF32,
                                       job_.tokenizer_name, hf::hf_bos_token(*job_.tokenizer))
                            .dump(2) +
                        "\n");
}

void AsyncCheckpointWriter::await_optimizer_files() {
  Timer timer;
  for (const std::string& name : job_.optimizer_files) {
    const std::string path = job_.tmp + "/" + name;
    std::error_code ec;
    while (!fs::exists(path, ec)) {
      if (cancel_) throw Cancelled{};
      if (const std::string why = file_error_text(failed_marker(job_.tmp, name)); !why.empty())
        KIRI_RAISE(kIo, "the rank that writes ", name, " failed: ", why);
      KIRI_CHECK_KIND(kCommTimeout, timer.seconds() < job_.timeout_s, path,
                      " did not appear within parallel.timeout_s = ", job_.timeout_s,
                      " s: the rank that writes it is dead or stuck");
      std::this_thread::sleep_for(kPoll);
    }
  }
}

void AsyncCheckpointWriter::commit() {
  ckpt::write_checkpoint_state(job_.tmp, job_.state_json);
  if (cancel_) throw Cancelled{};
  const std::string done = ckpt::commit_checkpoint(job_.root, job_.step, job_.keep_last);
  char times[160];
  std::snprintf(times, sizeof times,
                "training stopped %.3f s, %.3f s of it waiting for the previous save; the files "
                "took %.3f s in the background",
                job_.stall_s, job_.waited_s, started_.seconds());
  log::info("saved checkpoint ", done, " (", times, ")");
}

}  // namespace kiri::ckpt
