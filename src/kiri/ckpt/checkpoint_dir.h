#pragma once
// The checkpoint directory protocol (docs/checkpoints.md). A run's root holds
//
//   step_00000100/   complete checkpoints, each with state.json
//   latest           the name of the newest committed one ("step_00000100\n")
//   .step_00000200.tmp/  one being written (never read)
//
// A checkpoint is written into the hidden temporary directory and renamed
// into place only when complete, then `latest` is rewritten atomically, so a
// crash at any point leaves the previous checkpoint and `latest` intact.
// begin/commit are meant for one process (rank 0); other ranks may write
// their files into the directory begin returned between the two.
#include <cstdint>
#include <string>
#include <vector>

namespace kiri::ckpt {

// "step_00000100": the step zero-padded to 8 digits (more when larger).
std::string step_dir_name(int64_t step);

// Creates root (if needed) and a fresh root/.step_NNNNNNNN.tmp/ (removing a
// stale one left by a crash) and returns its path; write the files there.
std::string begin_checkpoint(const std::string& root, int64_t step);
// That temporary directory's path (where other ranks write their files).
std::string temp_dir(const std::string& root, int64_t step);

// Makes the checkpoint begun for `step` durable and current: fsyncs its
// files, renames it to root/step_NNNNNNNN (replacing an older one of the same
// step), fsyncs root and rewrites `latest` atomically. Requires state.json
// (written last by the trainer) in it. keep_last > 0 then removes all but
// the keep_last highest-numbered step directories up to `step` (never the one
// committed; directories of higher steps, an earlier attempt's, are kept).
// Returns the committed directory.
std::string commit_checkpoint(const std::string& root, int64_t step, int keep_last = 0);

// Given a step directory (it contains state.json) returns it; given a root
// (it contains `latest`) returns the step directory `latest` names. Anything
// else is a kCheckpoint error naming the path: among them a `latest` that is not
// a regular file of at most 4 KiB, or that names anything but a step_NNNNNNNN
// directory (a temporary .step_N.tmp one included).
std::string resolve_checkpoint(const std::string& path);

// Removes the temporary directories (.step_N.tmp) a save killed midway left under root,
// nothing else (a .step_N.old set aside by a replace may hold the only copy of a step).
// For the start of a run that owns root, before its first save. Returns the removed
// paths, sorted.
std::vector<std::string> remove_stale_temp_dirs(const std::string& root);

// The steps of the step_NNNNNNNN directories under root, ascending (empty if
// root does not exist). Temporary directories are not listed.
std::vector<int64_t> list_checkpoints(const std::string& root);

// Removes what this protocol wrote under root: the step directories, temporary and
// set-aside ones (.step_N.tmp, .step_N.old) and `latest`; nothing else (root
// stays). Returns the removed paths, sorted.
std::vector<std::string> remove_checkpoints(const std::string& root);

}  // namespace kiri::ckpt
