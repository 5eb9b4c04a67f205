#pragma once
// The asynchronous direct-I/O mechanism of the swap files (offload.engine; offload/async_io.h
// runs it): one enum for the config and the engine.

namespace kiri {

enum class IoEngine { kAuto, kIoUring, kThreads };
const char* name(IoEngine e);  // auto | io_uring | threads

}  // namespace kiri
