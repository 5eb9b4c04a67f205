#include "kiri/base/error.h"

#include <cstring>

namespace kiri {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kConfig:
      return "config error";
    case ErrorKind::kData:
      return "data error";
    case ErrorKind::kCheckpoint:
      return "checkpoint error";
    case ErrorKind::kOutOfMemory:
      return "out of memory";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kCommTimeout:
      return "communication timeout";
    case ErrorKind::kCommMismatch:
      return "collective mismatch";
    case ErrorKind::kCommAborted:
      return "communication aborted";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

static std::string basename_of(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

Error::Error(ErrorKind kind, const std::string& message, const char* file, int line)
    : std::runtime_error(
          str(error_kind_name(kind), ": ", message, " [", basename_of(file), ":", line, "]")),
      kind_(kind),
      message_(message),
      where_(str(basename_of(file), ":", line)) {}

void raise(ErrorKind kind, const std::string& message, const char* file, int line) {
  throw Error(kind, message, file, line);
}

}  // namespace kiri
