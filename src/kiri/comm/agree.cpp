#include "kiri/comm/agree.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace kiri::comm {

namespace {
// Error's where() is "file:line"; the constructor takes them apart.
std::pair<std::string, int> split_where(const std::string& where) {
  const size_t colon = where.rfind(':');
  if (colon == std::string::npos) return {where, 0};
  return {where.substr(0, colon), std::atoi(where.c_str() + colon + 1)};
}
}  // namespace

AgreedError::AgreedError(ErrorKind kind, const std::string& message, const std::string& where,
                         int failed_rank, int failures)
    : Error(kind, message, split_where(where).first.c_str(), split_where(where).second),
      failed_rank_(failed_rank),
      failures_(failures) {}

void run_agreed(Communicator& group, const std::function<void()>& body) {
  if (group.size() == 1) {
    body();
    return;
  }
  std::optional<Error> failure;
  try {
    body();
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure = Error(ErrorKind::kInternal, str("unexpected error: ", e.what()), __FILE__, __LINE__);
  }
  // What travels: the where and the message, one buffer, bounded (a message quoting a
  // hostile file need not be short).
  constexpr size_t kMaxText = 64 * 1024;
  std::string text = failure ? failure->where() + "\n" + failure->message() : std::string();
  if (text.size() > kMaxText) text = text.substr(0, kMaxText) + "... (cut)";
  Allocator allocator;
  Tensor mine = Tensor::empty({3}, DType::kI32, Category::kBuffers, allocator);
  mine.data<int32_t>()[0] = failure ? 1 : 0;
  mine.data<int32_t>()[1] = failure ? static_cast<int32_t>(failure->kind()) : 0;
  mine.data<int32_t>()[2] = static_cast<int32_t>(text.size());
  Tensor all =
      Tensor::empty({3 * int64_t{group.size()}}, DType::kI32, Category::kBuffers, allocator);
  group.all_gather(mine, all);
  const int32_t* s = all.data<int32_t>();
  int first = -1, failures = 0;
  for (int r = 0; r < group.size(); ++r)
    if (s[3 * r] != 0) {
      if (first < 0) first = r;
      ++failures;
    }
  if (first < 0) return;
  const int64_t length = s[3 * first + 2];
  Tensor bytes =
      Tensor::empty({std::max<int64_t>(length, 1)}, DType::kU8, Category::kBuffers, allocator);
  if (group.rank() == first) std::memcpy(bytes.data<uint8_t>(), text.data(), text.size());
  group.broadcast(bytes, first);
  const std::string got(reinterpret_cast<const char*>(bytes.data<uint8_t>()),
                        static_cast<size_t>(length));
  const size_t nl = got.find('\n');
  throw AgreedError(static_cast<ErrorKind>(s[3 * first + 1]), got.substr(nl + 1), got.substr(0, nl),
                    first, failures);
}

}  // namespace kiri::comm
