// Threads with names: every long-lived thread in Vigil is named (at most 15 characters), so it
// shows as such in top -H, perf, gdb and /proc/PID/task/*/comm.
// Thread-safety: a free function; the caller owns (and joins) the returned thread.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace vigil {

// Names longer than 15 characters are cut (the kernel's limit).
std::thread StartNamedThread(std::string name, std::function<void()> body);

}  // namespace vigil
