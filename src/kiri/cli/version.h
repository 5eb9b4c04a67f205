#pragma once
// What `kiri --version` prints after "kiri ": `git describe` of the sources at configure
// time, or the project version and "-unknown" where git or .git was missing.
namespace kiri::cli {
const char* version();
}  // namespace kiri::cli
