#pragma once
// File helpers for the data layer: whole-file reads and crash-safe writes.
#include <initializer_list>
#include <string>
#include <string_view>

namespace kiri::data {

// The whole file. Raises kData naming the path (`what` says what it should be)
// when it is missing or unreadable.
std::string read_file(const std::string& path, std::string_view what);

// Writes the parts, in order, to path + ".tmp", fsyncs it and renames it onto
// path, so a reader sees the old file or the whole new one, never a torn one.
// Raises kIo naming the path and the system's reason.
void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);

}  // namespace kiri::data
