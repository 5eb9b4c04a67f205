#pragma once
// Typed errors. Every error carries the file:line where it was raised and a
// message that names the numbers involved. Library code throws; only main()
// turns an error into an exit code.
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiri {

enum class ErrorKind {
  kInvalidArgument,  // a caller passed something wrong (shapes, sizes)
  kConfig,           // a configuration key or value is wrong
  kData,             // a data file is malformed
  kCheckpoint,       // a checkpoint is missing, truncated or inconsistent
  kOutOfMemory,      // the allocator's limit was exceeded
  kIo,               // the operating system refused a file operation
  kCommTimeout,      // a collective did not complete within its timeout
  kCommMismatch,     // ranks called different collectives (or sizes) at the same point
  kCommAborted,      // another rank failed, so this one stops
  kInternal,         // a broken invariant inside kiri
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, const char* file, int line);
  ErrorKind kind() const { return kind_; }
  // The message without the location prefix.
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string where_;
};

// Builds a message from streamable pieces: kiri::str("n_head ", h, " does not divide ", c).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void raise(ErrorKind kind, const std::string& message, const char* file, int line);

}  // namespace kiri

#define KIRI_RAISE(kind, ...) \
  ::kiri::raise(::kiri::ErrorKind::kind, ::kiri::str(__VA_ARGS__), __FILE__, __LINE__)

// KIRI_CHECK(cond, "message pieces", values...): throws kInvalidArgument naming the condition.
#define KIRI_CHECK(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::kiri::raise(::kiri::ErrorKind::kInvalidArgument,                                          \
                    ::kiri::str("check failed: " #cond ": ", ##__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)

#define KIRI_CHECK_KIND(kind, cond, ...)                                                    \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::kiri::raise(::kiri::ErrorKind::kind, ::kiri::str(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)
