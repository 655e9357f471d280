// Threads with names: every long-lived thread in Vigil is named (at most 15 characters), so it
// shows as such in top -H, perf, gdb and /proc/PID/task/*/comm.
// Thread-safety: a free function; the caller owns (and joins) the returned thread.
#pragma once

#include <functional>
#include <thread>

namespace vigil {

std::thread StartNamedThread(const char* name, std::function<void()> body);

}  // namespace vigil
