// host_parts.cuh: `qq_parts`, the host's compiled passes split over threads (host_rows.cpp,
// host_stim_memory.cpp; core/native.py builds them with it). Host C++ only.
#pragma once

#include <thread>
#include <vector>

typedef long long qq_i64;

// Runs body(t, lo, hi) on `threads` consecutive parts of 0 .. n (part t: lo .. hi - 1), part 0 in
// the calling thread and each other in a thread of its own, all joined before it returns (a part
// whose thread cannot be started runs here). The passes that use it write each part's own memory, so
// what they write does not depend on the number of threads; the threads are for memory new to the
// process, whose pages fault in on first write (a 252 MB table: 78 ms in one thread, 12 ms in
// eight, H200 host).
template <class Body> static void qq_parts(qq_i64 threads, qq_i64 n, Body body) {
    if (threads > n)
        threads = n;
    if (threads <= 1) {
        body((qq_i64)0, (qq_i64)0, n);
        return;
    }
    std::vector<std::thread> started;
    std::vector<qq_i64> here;  // parts left to this thread
    for (qq_i64 t = 1; t < threads; ++t) {
        const qq_i64 lo = n * t / threads, hi = n * (t + 1) / threads;
        try {
            started.emplace_back(body, t, lo, hi);
        } catch (...) {
            here.push_back(t);
        }
    }
    body((qq_i64)0, (qq_i64)0, n / threads);
    for (qq_i64 t : here)
        body(t, n * t / threads, n * (t + 1) / threads);
    for (auto& thread : started)
        thread.join();
}
