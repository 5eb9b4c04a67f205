#pragma once
// A folder rewritten as a whole: the new contents are built in a temporary folder beside the
// target and swapped into place with one rename, so a reader (or a crash at any point) finds
// the old complete folder or the new complete one, never a mix (docs/data.md, "Output").
//
// The temporary folders are named `.NAME.kiri-new-PID-N` (the one being built) and
// `.NAME.kiri-old-PID-N` (the old folder between the two renames of the fallback below),
// beside NAME; N tells apart the ranks of one process (the thread test backend), which may
// prepare one corpus at the same time. A killed run leaves them; the next StagedDir for NAME
// removes those whose process is gone, naming each in a log line.
#include <functional>
#include <string>

namespace kiri::data {

class StagedDir {
 public:
  // `target`: the folder to replace (it need not exist; a symlink to a folder stands for the
  // folder it names). `ours(name)`: whether an entry of the existing target is one the
  // rewrite replaces; the target holding anything else is kData naming the entry, since the
  // swap would delete it. kData when the target is not a folder or cannot be resolved, kIo
  // when the temporary folder cannot be made.
  StagedDir(const std::string& target, const std::function<bool(const std::string&)>& ours);
  // Removes the temporary folder unless commit() put it in place.
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  // The temporary folder to write the new contents into.
  const std::string& path() const { return staged_; }
  // The folder the contents end up in (the target, symlinks resolved).
  const std::string& target() const { return target_; }

  // Makes the staged folder the target: fsyncs it, exchanges it with the old target in one
  // renameat2(RENAME_EXCHANGE) (or renames it into place when there is none), fsyncs the
  // parent, then removes the old folder. Where the filesystem cannot exchange, the old
  // target is renamed aside first: a crash between the two renames leaves no folder at the
  // target (a "does not exist" error on the next read) and the old one beside it. kIo
  // naming both paths when a rename fails; the old target is then left as it was.
  void commit();

 private:
  std::string target_;
  std::string staged_;
  bool committed_ = false;
};

// Test hook of the rewrite's crash points (train/faults.h's KIRI_FAULT, kind `datakill`):
// with KIRI_FAULT=datakill:0:N the process dies by SIGKILL at point N.
//   1 the staged folder made, empty     2 train.bin written in it     3 val.bin written
//   4 corpus.json written (the staged folder complete)      5 swapped in, old not yet removed
void data_fault_point(int point);

}  // namespace kiri::data
