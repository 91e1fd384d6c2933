// What CUDA supplies to gpureco's kernels (kernels/*.cu), for host C++ (g++ -std=c++17), so
// that the unmodified kernels run in CI without a GPU. Every CUDA thread of a block is a
// cooperative fiber (ucontext) on one OS thread; __syncthreads() and the warp intrinsics are
// the only points where a fiber gives way, and they check that the block's threads meet as
// CUDA requires (same barrier, same mask), reporting a violation instead of hanging or
// guessing. Blocks run one after another. See tests/emulation/README.md for what this
// cannot see. Built by tests/emulation/emulator.py, which appends the launch wrappers.
#pragma once

// System headers first: some of them look at __CUDACC__ (defined at the end).
#include <link.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define GR_EMU_ASAN 1
#endif
// ThreadSanitizer (emulator.py sanitize="thread"): every CUDA thread is a TSan fiber, switched
// to without synchronisation, so that TSan sees the block's threads as concurrent. Only what
// orders memory in CUDA orders it here: __syncthreads() (the whole block) and __syncwarp()
// (its lanes); the launch's start and end; never a shuffle or a vote, which exchange registers,
// nor an atomic (CUDA's are relaxed). A thread that reads shared or global memory another thread
// of its block wrote without such an order between them is a data race TSan reports, although
// the fibers' one-at-a-time run would have hidden it. Blocks stay ordered one after another;
// the emulator's own bookkeeping is not checked (ignore regions).
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#define GR_EMU_TSAN 1
#define GR_EMU_TSAN_ONLY(...) __VA_ARGS__
#else
#define GR_EMU_TSAN_ONLY(...)
#endif

#ifdef GR_EMU_DISCOVER  // emulator.py finds the kernels and their launch bounds in the preprocessed source
#define __global__ gr_emu_kernel
#define __launch_bounds__(...) gr_emu_launch_bounds(__VA_ARGS__)
#else
#define __global__
#define __launch_bounds__(...)
#endif
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
// Per block: blocks of one launch run one at a time, so a variable per OS thread is per block.
// Thread-local storage also lets the launcher find (and poison) every __shared__ variable of
// the module: they are the module's PT_TLS segment (the runtime below adds one byte to it).
#define __shared__ static thread_local
// A kernel's dynamic shared memory (kernels/common.cuh): static here, of the size the kernel uses, and the launch must
// give at least as much (its shared_mem), where on a device the kernel would read and write past its shared memory.
#define GR_DYNAMIC_SHARED(T, name, bytes) \
    __shared__ T name[(bytes) / sizeof(T)]; \
    ::gr_emu::dynamic_shared((bytes), __FILE__, __LINE__)
#define __constant__ static

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};
static const int warpSize = 32;

namespace gr_emu {

enum State { READY, AT_BARRIER, AT_WARP, DONE };
enum WarpKind { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP, REDUX_MIN, REDUX_MAX };
static const char* const warp_names[] = {"__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                         "__ballot_sync", "__any_sync",     "__all_sync",       "__syncwarp",
                                         "__reduce_min_sync", "__reduce_max_sync"};

struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    unsigned linear;
    State state;
    const char* file;  // where it waits
    int line;
    WarpKind kind;
    unsigned mask;
    uint64_t value, result;
    unsigned arg;
    int width;
    char* stack;
    void* fake_stack;  // ASan's, while switched out
    void* tsan;                  // TSan's fiber
    char hb_ring[4];             // TSan: what the thread released at its last __syncwarp()s, by arrival % 4
    unsigned n_syncwarp;         // its __syncwarp()s so far in the block
    unsigned char hb_slot;       // where it released at the __syncwarp() it waits at
    unsigned char peer_slot[32]; // where each lane of that __syncwarp()'s mask released
    int ignoring;                // TSan: the emulator's bookkeeping scopes it is in
};

// The launcher's state: one launch at a time per module (a mutex), fibers on the calling thread.
struct Emulator {
    std::mutex lock;
    std::vector<Fiber> fibers;
    char* stacks = nullptr;
    size_t stack_size = 0, n_stacks = 0, mapped = 0;
    uint3 block_idx{0, 0, 0};
    dim3 block_dim{1, 1, 1}, grid_dim{1, 1, 1};
    Fiber* cur = nullptr;
    ucontext_t sched;
    const void* sched_bottom = nullptr;
    size_t sched_size = 0;
    std::deque<unsigned> ready;
    std::vector<unsigned> order;  // the schedule: rank of each thread when several resume at once
    int schedule = 0;             // 0 forward, 1 reverse, 2 shuffled (re-drawn at every release)
    std::mt19937_64 rng;
    unsigned n_threads = 0, n_done = 0, n_barrier = 0;
    std::string error;
    uint32_t shared_mem = 0;  // the launch's dynamic shared memory, in bytes
    void (*thunk)(void*) = nullptr;
    void* thunk_arg = nullptr;
    sigjmp_buf fault_jump;
    void* fault_address = nullptr;
    int fault_signal = 0;
    char* alt_stack = nullptr;
    void* tsan_sched = nullptr;  // TSan: the launching thread's fiber
    unsigned barrier_gen = 0;    // __syncthreads() completed in the block
    char hb_start, hb_end, hb_barrier[2];  // TSan sync objects: the block's start and end, barriers by generation
};
inline Emulator E;

// TSan ignores the emulator's own memory accesses (its scheduling state, which the fibers
// share) in the scope of one of these; synchronisation is still seen.
struct Bookkeeping {
#ifdef GR_EMU_TSAN
    Fiber* f = E.cur;  // (null in the launching thread)
    Bookkeeping() {
        __tsan_ignore_thread_begin();
        if (f) ++f->ignoring;
    }
    ~Bookkeeping() {
        if (f) --f->ignoring;
        __tsan_ignore_thread_end();
    }
#else
    Bookkeeping() {}
#endif
    Bookkeeping(const Bookkeeping&) = delete;
};

inline std::string format(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

inline std::string ranges(const std::vector<unsigned>& ids) {  // "0-31, 40"
    std::string out;
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (!out.empty()) out += ", ";
        out += i == j ? format("%u", ids[i]) : format("%u-%u", ids[i], ids[j]);
        i = j + 1;
    }
    return out;
}

inline std::string where(const Fiber& f) {
    if (f.state == DONE) return "exited";
    if (f.state == READY) return "still running";
    if (f.state == AT_BARRIER) return format("wait at __syncthreads() (%s:%d)", f.file, f.line);
    return format("wait at %s(mask 0x%08x) (%s:%d)", warp_names[f.kind], f.mask, f.file, f.line);
}

// Every thread of the block by what it is doing, for error messages.
inline std::string describe() {
    std::vector<std::pair<std::string, std::vector<unsigned>>> groups;
    for (unsigned t = 0; t < E.n_threads; ++t) {
        const Fiber& f = E.fibers[t];
        std::string w = where(f);
        auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == w; });
        if (it == groups.end()) groups.push_back({w, {f.linear}});
        else it->second.push_back(f.linear);
    }
    std::string out;
    for (auto& g : groups) out += format("; thread(s) %s ", ranges(g.second).c_str()) + g.first;
    return out;
}

// The first violation is kept; the threads still running then go on to their next barrier or
// warp intrinsic (which no longer releases anyone), so that the report shows where all of them are.
inline void fail(const std::string& message) {
    if (E.error.empty()) E.error = message;
}

// GR_DYNAMIC_SHARED's check (below): the launch gave the kernel at least the dynamic shared memory it uses.
inline void dynamic_shared(size_t bytes, const char* file, int line) {
    if (E.shared_mem < bytes)
        fail(format("%s:%d: the kernel uses %zu bytes of dynamic shared memory; its launch gave %u (shared_mem)", file,
                    line, bytes, E.shared_mem));
}

inline void to_fiber(Fiber* f) {
    E.cur = f;
#ifdef GR_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, E.stack_size);
    swapcontext(&E.sched, &f->ctx);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    GR_EMU_TSAN_ONLY(__tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);)
    swapcontext(&E.sched, &f->ctx);
#endif
    E.cur = nullptr;
}

// The current fiber gives way; it resumes when the scheduler picks it again (never after an error).
inline void to_scheduler(bool exiting = false) {
    Fiber* f = E.cur;
#ifdef GR_EMU_ASAN
    __sanitizer_start_switch_fiber(exiting ? nullptr : &f->fake_stack, E.sched_bottom, E.sched_size);
    swapcontext(&f->ctx, &E.sched);
    __sanitizer_finish_switch_fiber(f->fake_stack, &E.sched_bottom, &E.sched_size);
#else
    (void)exiting;
    GR_EMU_TSAN_ONLY(__tsan_switch_to_fiber(E.tsan_sched, __tsan_switch_to_fiber_no_sync);)
    swapcontext(&f->ctx, &E.sched);
#endif
}

inline void make_ready(std::vector<unsigned>& ids) {
    if (E.schedule == 2) std::shuffle(E.order.begin(), E.order.end(), E.rng);
    std::sort(ids.begin(), ids.end(), [](unsigned a, unsigned b) { return E.order[a] < E.order[b]; });
    for (unsigned t : ids) {
        E.fibers[t].state = READY;
        E.ready.push_back(t);
    }
}

inline void exit_fiber() {
    Fiber* f = E.cur;
    GR_EMU_TSAN_ONLY(__tsan_release(&E.hb_end);)
    f->state = DONE;
    ++E.n_done;
    if (E.n_barrier > 0) fail(format("thread %u exited while other threads wait at a barrier", f->linear));
    const unsigned lane = f->linear & 31, base = f->linear - lane;
    for (unsigned l = 0; l < 32 && base + l < E.n_threads; ++l) {
        const Fiber& g = E.fibers[base + l];
        if (g.state == AT_WARP && (g.mask >> lane & 1))
            fail(format("thread %u (lane %u) exited while lane %u waits for it in %s(mask 0x%08x) (%s:%d)", f->linear,
                        lane, l, warp_names[g.kind], g.mask, g.file, g.line));
    }
}

inline void entry() {
#ifdef GR_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &E.sched_bottom, &E.sched_size);
#endif
    GR_EMU_TSAN_ONLY(__tsan_acquire(&E.hb_start);)  // the launcher's copies and the poisoned shared memory
    E.thunk(E.thunk_arg);
    {
        Bookkeeping untracked;
        exit_fiber();
    }
    to_scheduler(true);
    __builtin_trap();  // an exited fiber is never resumed
}

// A thread arrives at __syncthreads(): every thread of the block must arrive at this one.
inline void barrier(const char* file, int line) {
    Bookkeeping untracked;
    Fiber* f = E.cur;
    // Release into this generation's object; acquire it on resumption, when every thread has released.
    // (Two objects: no thread releases into generation g + 2 before every thread resumed from g.)
    char* hb = &E.hb_barrier[E.barrier_gen & 1];
    GR_EMU_TSAN_ONLY(__tsan_release(hb);)
    f->state = AT_BARRIER;
    f->file = file;
    f->line = line;
    if (!E.error.empty()) to_scheduler();
    if (E.n_done > 0) {
        fail(format("__syncthreads() (%s:%d) is reached after some threads of the block exited", file, line));
        to_scheduler();
    }
    if (++E.n_barrier == E.n_threads) {
        for (unsigned t = 0; t < E.n_threads; ++t)
            if (E.fibers[t].line != line || strcmp(E.fibers[t].file, file) != 0) {
                fail("the threads of the block wait at different __syncthreads()");
                to_scheduler();
            }
        E.n_barrier = 0;
        ++E.barrier_gen;
        std::vector<unsigned> all(E.n_threads);
        for (unsigned t = 0; t < E.n_threads; ++t) all[t] = t;
        make_ready(all);
    }
    to_scheduler();
    GR_EMU_TSAN_ONLY(__tsan_acquire(hb);)
    (void)hb;
}

inline uint64_t poison_bits(int size) {
    uint64_t bits;
    memset(&bits, 0xCD, sizeof bits);
    return size == 8 ? bits : bits & 0xFFFFFFFFu;
}

// Every lane named in the mask meets at the same intrinsic with the same mask, then each gets
// its result; a lane that reads from a lane outside the mask gets poison (CUDA: undefined).
inline uint64_t warp_op(WarpKind kind, unsigned mask, uint64_t value, int size, unsigned arg, int width,
                        const char* file, int line) {
    Bookkeeping untracked;
    Fiber* f = E.cur;
    const unsigned lane = f->linear & 31, base = f->linear - lane;
#ifdef GR_EMU_TSAN
    if (kind == SYNCWARP) {  // __syncwarp orders memory among its lanes (a vote or a shuffle does not)
        f->hb_slot = (unsigned char)(f->n_syncwarp++ & 3);
        __tsan_release(&f->hb_ring[f->hb_slot]);
    }
#endif
    f->kind = kind;
    f->mask = mask;
    f->value = value;
    f->arg = arg;
    f->width = width;
    f->file = file;
    f->line = line;
    f->state = AT_WARP;
    const char* name = warp_names[kind];
    if (!E.error.empty()) to_scheduler();
    if (!(mask >> lane & 1)) {
        fail(format("%s(mask 0x%08x) (%s:%d) is called by thread %u (lane %u), which the mask does not name", name,
                    mask, file, line, f->linear, lane));
        to_scheduler();
    }
    if (width < 1 || width > 32 || (width & (width - 1))) {
        fail(format("%s (%s:%d): width %d is not a power of 2 up to 32", name, file, line, width));
        to_scheduler();
    }
    bool all = true;
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask >> l & 1)) continue;
        if (base + l >= E.n_threads) {
            fail(format("%s(mask 0x%08x) (%s:%d) names lane %u, which a block of %u threads does not have", name, mask,
                        file, line, l, E.n_threads));
            to_scheduler();
        }
        const Fiber& g = E.fibers[base + l];
        if (g.state == DONE) {
            fail(format("%s(mask 0x%08x) (%s:%d) names lane %u (thread %u), which has exited", name, mask, file, line,
                        l, g.linear));
            to_scheduler();
        }
        if (g.state != AT_WARP) {
            all = false;
        } else if (g.kind != kind || g.mask != mask || g.line != line || strcmp(g.file, file) != 0) {
            fail(format("lanes %u and %u of warp %u meet at different warp intrinsics", lane, l, base / 32));
            to_scheduler();
        }
    }
    if (all) {
        std::vector<unsigned> group;
        uint64_t votes = 0, lo = ~0ull, hi = 0;  // (lo, hi: the unsigned minimum and maximum, __reduce_*_sync)
        for (unsigned l = 0; l < 32; ++l) {
            if (!(mask >> l & 1)) continue;
            const uint64_t v = E.fibers[base + l].value;
            if (v) votes |= 1ull << l;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        for (unsigned l = 0; l < 32; ++l) {
            if (!(mask >> l & 1)) continue;
            Fiber& g = E.fibers[base + l];
            const unsigned w = (unsigned)g.width, seg = l & ~(w - 1), a = g.arg;  // each lane's own operand
            unsigned src = l;
            switch (kind) {
                case SHFL_IDX: src = seg + (a & (w - 1)); break;
                case SHFL_UP: src = (l - seg) >= a ? l - a : l; break;
                case SHFL_DOWN: src = (l - seg) + a < w ? l + a : l; break;
                case SHFL_XOR: src = (l ^ a) < seg + w ? l ^ a : l; break;
                default: break;
            }
            if (kind <= SHFL_XOR) g.result = (mask >> src & 1) ? E.fibers[base + src].value : poison_bits(size);
            else if (kind == BALLOT) g.result = votes;
            else if (kind == ANY) g.result = votes != 0;
            else if (kind == ALL) g.result = votes == mask;
            else if (kind == REDUX_MIN) g.result = lo;
            else if (kind == REDUX_MAX) g.result = hi;
#ifdef GR_EMU_TSAN
            if (kind == SYNCWARP)
                for (unsigned m = 0; m < 32; ++m)
                    if (mask >> m & 1) g.peer_slot[m] = E.fibers[base + m].hb_slot;
#endif
            group.push_back(g.linear);
        }
        make_ready(group);
    }
    to_scheduler();
#ifdef GR_EMU_TSAN
    if (kind == SYNCWARP && E.error.empty())
        for (unsigned m = 0; m < 32; ++m)
            if (mask >> m & 1) __tsan_acquire(&E.fibers[base + m].hb_ring[f->peer_slot[m]]);
#endif
    return f->result;
}

template <typename T>
inline uint64_t bits_of(T v) {
    static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8, "warp intrinsics take arithmetic types");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

template <typename T>
inline T atomic_update(T* p, T (*op)(T, T), T v) {  // compare-and-swap loop, for floats, min and max
    T old, want;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do want = op(old, v);
    while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}

// This module's __shared__ variables: its PT_TLS segment, in the calling thread.
static thread_local char tls_anchor;  // makes sure the segment exists and is allocated here
struct TlsSearch {
    const void* inside;
    char* data;
    size_t size;
};
inline int find_tls(struct dl_phdr_info* info, size_t, void* arg) {
    auto* s = static_cast<TlsSearch*>(arg);
    bool mine = false;
    size_t size = 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        const uintptr_t a = (uintptr_t)s->inside, lo = info->dlpi_addr + ph.p_vaddr;
        if (ph.p_type == PT_LOAD && a >= lo && a < lo + ph.p_memsz) mine = true;
        if (ph.p_type == PT_TLS) size = ph.p_memsz;
    }
    if (!mine) return 0;
    s->data = static_cast<char*>(info->dlpi_tls_data);
    s->size = size;
    return 1;
}
inline TlsSearch shared_memory() {
    tls_anchor = 1;
    TlsSearch s{(const void*)&find_tls, nullptr, 0};
    dl_iterate_phdr(find_tls, &s);
    if (s.data && (&tls_anchor < s.data || &tls_anchor >= s.data + s.size)) s.data = nullptr;
    return s;
}

struct Config {  // emulator.py: _Config
    uint32_t grid[3], block[3];
    int32_t schedule, block_order;
    uint64_t seed;
    int32_t poison;
    uint32_t stack_kib;
    uint32_t shared_mem;
    char* error;
    uint64_t error_size;
};

inline bool ensure_stacks(size_t n, size_t size) {
    if (E.stacks && E.n_stacks >= n && E.stack_size == size) return true;
    if (E.stacks) munmap(E.stacks, E.mapped);
    const size_t page = 4096, slot = size + page;  // a guard page below each stack: overflow faults
    E.mapped = n * slot;
    void* p = mmap(nullptr, E.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        E.stacks = nullptr;
        return false;
    }
    E.stacks = static_cast<char*>(p);
    for (size_t i = 0; i < n; ++i) mprotect(E.stacks + i * slot, page, PROT_NONE);
    E.n_stacks = n;
    E.stack_size = size;
    E.fibers.assign(n, Fiber{});  // (TSan fibers are never destroyed: one with ignores on would be reported)
    for (size_t i = 0; i < n; ++i) E.fibers[i].stack = E.stacks + i * slot + page;
    GR_EMU_TSAN_ONLY(for (Fiber& f : E.fibers) f.tsan = __tsan_create_fiber(0);)
    return true;
}

// The fiber stacks go back after every launch, so that a module keeps no mapping between its
// launches: each stack's guard page splits the mapping, two of the process's vm.max_map_count
// (65,530) a thread, and a test process loads a hundred modules and more, which are never
// unloaded (with the stacks kept, CI's one process ran out of mappings and hung at its next
// thread start).
inline void release_stacks() {
    if (E.stacks) munmap(E.stacks, E.mapped);
    E.stacks = nullptr;
    E.n_stacks = 0;
}

inline void on_fault(int sig, siginfo_t* info, void*) {
    E.fault_signal = sig;
    E.fault_address = info->si_addr;
    siglongjmp(E.fault_jump, 1);
}

// While a launch runs, a fault in a kernel (a wild or null pointer, a fiber's stack overflow,
// an integer division by zero) becomes an error, as CUDA's "illegal memory access", instead of
// killing the process. Not under AddressSanitizer, which reports it itself.
struct FaultGuard {
    static constexpr int signals[3] = {SIGSEGV, SIGBUS, SIGFPE};
    struct sigaction old[3];
    stack_t old_stack;
    FaultGuard() {
        const size_t size = 1 << 16;
        if (!E.alt_stack) E.alt_stack = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE,
                                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        stack_t alt{};
        alt.ss_sp = E.alt_stack;
        alt.ss_size = size;
        sigaltstack(&alt, &old_stack);
        struct sigaction sa{};
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < 3; ++i) sigaction(signals[i], &sa, &old[i]);
    }
    ~FaultGuard() {
        for (int i = 0; i < 3; ++i) sigaction(signals[i], &old[i], nullptr);
        sigaltstack(&old_stack, nullptr);
    }
};

inline std::string fault() {
    const char* addr = static_cast<const char*>(E.fault_address);
    std::string what = E.fault_signal == SIGFPE ? std::string("arithmetic exception (SIGFPE)")
                                                : format("illegal memory access at %p (%s)", E.fault_address,
                                                         E.fault_signal == SIGBUS ? "SIGBUS" : "SIGSEGV");
    for (unsigned t = 0; t < E.n_threads; ++t)
        if (addr < E.fibers[t].stack && addr >= E.fibers[t].stack - 4096)
            what = format("stack overflow: a fiber has %zu KiB of stack (RawModule(stack_kib=...))", E.stack_size >> 10);
    return (E.cur ? format("thread %u: ", E.cur->linear) : std::string()) + what;
}

inline void run_block() {
    E.ready.clear();
    E.n_done = E.n_barrier = E.barrier_gen = 0;
    E.order.resize(E.n_threads);
    for (unsigned t = 0; t < E.n_threads; ++t) E.order[t] = E.schedule == 1 ? E.n_threads - 1 - t : t;
    std::vector<unsigned> all(E.n_threads);
    for (unsigned t = 0; t < E.n_threads; ++t) {
        Fiber& f = E.fibers[t];
        f.linear = t;
        f.tid = uint3{t % E.block_dim.x, t / E.block_dim.x % E.block_dim.y, t / (E.block_dim.x * E.block_dim.y)};
        f.file = "";
        f.line = 0;
        f.fake_stack = nullptr;
        f.n_syncwarp = 0;
#ifdef GR_EMU_TSAN
        if (f.ignoring) {  // abandoned in the emulator's bookkeeping by a block that failed: a fresh TSan fiber
            f.tsan = __tsan_create_fiber(0);
            f.ignoring = 0;
        }
#endif
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = E.stack_size;
        f.ctx.uc_link = nullptr;
#ifdef GR_EMU_ASAN
        __asan_unpoison_memory_region(f.stack, E.stack_size);  // frames left by an abandoned block
#endif
        makecontext(&f.ctx, entry, 0);
        all[t] = t;
    }
    make_ready(all);
    GR_EMU_TSAN_ONLY(__tsan_release(&E.hb_start);)
    while (!E.ready.empty()) {
        const unsigned t = E.ready.front();
        E.ready.pop_front();
        to_fiber(&E.fibers[t]);
    }
    GR_EMU_TSAN_ONLY(__tsan_acquire(&E.hb_end);)
    if (E.error.empty() && E.n_done != E.n_threads) fail("deadlock: no thread can go on");
}

// Runs every block of the grid; 0, or 1 with the error message in c->error.
inline int run_grid(const Config* c, void (*thunk)(void*), void* arg) {
    std::lock_guard<std::mutex> guard(E.lock);
#if !defined(GR_EMU_ASAN) && !defined(GR_EMU_TSAN)
    // (not under a sanitizer, in a process of its own with a few modules: TSan would take a new
    // fiber's stack at an old one's address for memory the old one's accesses race with)
    struct StacksBack {
        ~StacksBack() { release_stacks(); }
    } stacks_back;  // (after the launch, whichever way it ends; the lock still held)
#endif
    Bookkeeping untracked;  // the launching thread only schedules (and poisons shared memory)
    GR_EMU_TSAN_ONLY(E.tsan_sched = __tsan_get_current_fiber();)
    auto report = [&](const std::string& m) {
        snprintf(c->error, c->error_size, "%s", m.c_str());
        return 1;
    };
    const uint64_t nx = c->grid[0], ny = c->grid[1], nz = c->grid[2];
    E.n_threads = c->block[0] * c->block[1] * c->block[2];
    if (!ensure_stacks(E.n_threads, (size_t)c->stack_kib * 1024)) return report("cannot map the fiber stacks");
    E.block_dim = dim3{c->block[0], c->block[1], c->block[2]};
    E.grid_dim = dim3{c->grid[0], c->grid[1], c->grid[2]};
    E.schedule = c->schedule;
    E.shared_mem = c->shared_mem;
    E.rng.seed(c->seed);
    E.thunk = thunk;
    E.thunk_arg = arg;
    std::vector<uint64_t> blocks(nx * ny * nz);
    for (uint64_t i = 0; i < blocks.size(); ++i) blocks[i] = i;
    if (c->block_order == 1) std::reverse(blocks.begin(), blocks.end());
    if (c->block_order == 2) std::shuffle(blocks.begin(), blocks.end(), E.rng);
    const TlsSearch shared = shared_memory();
    if (!shared.data) return report("cannot find this module's __shared__ variables (its PT_TLS segment)");
#if !defined(GR_EMU_ASAN) && !defined(GR_EMU_TSAN)
    FaultGuard faults;
    if (sigsetjmp(E.fault_jump, 1))
        return report(format("block (%u, %u, %u): ", E.block_idx.x, E.block_idx.y, E.block_idx.z) + fault() +
                      describe());
#endif
    for (uint64_t i : blocks) {
        E.block_idx = uint3{(unsigned)(i % nx), (unsigned)(i / nx % ny), (unsigned)(i / (nx * ny))};
        memset(shared.data, c->poison, shared.size);
        E.error.clear();
        run_block();
        if (!E.error.empty())
            return report(format("block (%u, %u, %u): ", E.block_idx.x, E.block_idx.y, E.block_idx.z) + E.error +
                          describe());
    }
    return 0;
}

// The launcher's guard zones around array arguments: unreadable under AddressSanitizer.
inline void asan_poison(void* p, size_t n, int on) {
#ifdef GR_EMU_ASAN
    if (on) __asan_poison_memory_region(p, n);
    else __asan_unpoison_memory_region(p, n);
#else
    (void)p, (void)n, (void)on;
#endif
}

// Type codes of kernel parameters, for the Python side's argument checks.
template <typename T> struct code { static std::string get() { return "?"; } };
#define GR_EMU_CODE(T, C) \
    template <> struct code<T> { static std::string get() { return C; } };
GR_EMU_CODE(float, "f32")
GR_EMU_CODE(double, "f64")
GR_EMU_CODE(signed char, "i8")
GR_EMU_CODE(char, "i8")
GR_EMU_CODE(unsigned char, "u8")
GR_EMU_CODE(bool, "b1")
GR_EMU_CODE(short, "i16")
GR_EMU_CODE(unsigned short, "u16")
GR_EMU_CODE(int, "i32")
GR_EMU_CODE(unsigned int, "u32")
GR_EMU_CODE(long, "i64")
GR_EMU_CODE(unsigned long, "u64")
GR_EMU_CODE(long long, "i64")
GR_EMU_CODE(unsigned long long, "u64")
GR_EMU_CODE(void, "void")
template <typename T> struct code<T*> {
    static std::string get() { return std::string(std::is_const<T>::value ? "*const " : "*") + code<std::remove_cv_t<T>>::get(); }
};
static_assert(sizeof(long) == 8, "an LP64 platform");

template <typename... A>
std::string signature(void (*)(A...)) {
    std::string s;
    ((s += code<std::remove_cv_t<A>>::get() + ","), ...);
    return s;
}

template <typename... A>
struct Call {
    void (*fn)(A...);
    void** args;  // args[i] points to the value of parameter i
    template <size_t... I>
    void go(std::index_sequence<I...>) { fn(*static_cast<std::remove_cv_t<A>*>(args[I])...); }
    static void thunk(void* p) { static_cast<Call*>(p)->go(std::index_sequence_for<A...>{}); }
};

template <typename... A>
int launch(void (*fn)(A...), void** args, const Config* c) {
    Call<A...> call{fn, args};
    return run_grid(c, &Call<A...>::thunk, &call);
}

}  // namespace gr_emu

#define threadIdx (::gr_emu::E.cur->tid)
#define blockIdx (::gr_emu::E.block_idx)
#define blockDim (::gr_emu::E.block_dim)
#define gridDim (::gr_emu::E.grid_dim)

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::gr_emu::barrier(file, line);
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::gr_emu::warp_op(::gr_emu::SYNCWARP, mask, 0, 4, 0, 32, file, line);
}
// Memory ordering between threads is not modelled: a fiber runs alone until it gives way.
inline void __threadfence() {}
inline void __threadfence_block() {}

#define GR_EMU_SHFL(NAME, KIND, ARG)                                                                       \
    template <typename T>                                                                                  \
    inline T NAME(unsigned mask, T var, ARG, int width = warpSize, const char* file = __builtin_FILE(), \
                  int line = __builtin_LINE()) {                                                           \
        return ::gr_emu::from_bits<T>(::gr_emu::warp_op(::gr_emu::KIND, mask, ::gr_emu::bits_of(var),     \
                                                        (int)sizeof(T), (unsigned)arg, width, file, line)); \
    }
GR_EMU_SHFL(__shfl_sync, SHFL_IDX, int arg)
GR_EMU_SHFL(__shfl_up_sync, SHFL_UP, unsigned arg)
GR_EMU_SHFL(__shfl_down_sync, SHFL_DOWN, unsigned arg)
GR_EMU_SHFL(__shfl_xor_sync, SHFL_XOR, int arg)
#undef GR_EMU_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (unsigned)::gr_emu::warp_op(::gr_emu::BALLOT, mask, pred != 0, 4, 0, 32, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)::gr_emu::warp_op(::gr_emu::ANY, mask, pred != 0, 4, 0, 32, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)::gr_emu::warp_op(::gr_emu::ALL, mask, pred != 0, 4, 0, 32, file, line);
}

// sm_80's REDUX, for unsigned values (the kernels use no other)
inline unsigned __reduce_min_sync(unsigned mask, unsigned value, const char* file = __builtin_FILE(),
                                  int line = __builtin_LINE()) {
    return (unsigned)::gr_emu::warp_op(::gr_emu::REDUX_MIN, mask, value, 4, 0, 32, file, line);
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned value, const char* file = __builtin_FILE(),
                                  int line = __builtin_LINE()) {
    return (unsigned)::gr_emu::warp_op(::gr_emu::REDUX_MAX, mask, value, 4, 0, 32, file, line);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }

// The device's IEEE intrinsics; never fused (the emulator compiles with -ffp-contract=off).
inline double __dmul_rn(double x, double y) { volatile double p = x * y; return p; }
inline double __dadd_rn(double x, double y) { volatile double s = x + y; return s; }
inline float __fmul_rn(float x, float y) { volatile float p = x * y; return p; }
inline float __fadd_rn(float x, float y) { volatile float s = x + y; return s; }
inline long long __double_as_longlong(double x) { long long b; memcpy(&b, &x, sizeof b); return b; }
inline double __longlong_as_double(long long b) { double x; memcpy(&x, &b, sizeof x); return x; }
inline int __float_as_int(float x) { int b; memcpy(&b, &x, sizeof b); return b; }
inline float __int_as_float(int b) { float x; memcpy(&x, &b, sizeof x); return x; }

// Atomics: CUDA's overloads only (no long / int64_t ones: the kernels cast to unsigned long long).
#define GR_EMU_FETCH(NAME, BUILTIN, T) \
    inline T NAME(T* p, T v) { return BUILTIN(p, v, __ATOMIC_SEQ_CST); }
GR_EMU_FETCH(atomicAdd, __atomic_fetch_add, int)
GR_EMU_FETCH(atomicAdd, __atomic_fetch_add, unsigned int)
GR_EMU_FETCH(atomicAdd, __atomic_fetch_add, unsigned long long)
GR_EMU_FETCH(atomicSub, __atomic_fetch_sub, int)
GR_EMU_FETCH(atomicSub, __atomic_fetch_sub, unsigned int)
GR_EMU_FETCH(atomicOr, __atomic_fetch_or, int)
GR_EMU_FETCH(atomicOr, __atomic_fetch_or, unsigned int)
GR_EMU_FETCH(atomicOr, __atomic_fetch_or, unsigned long long)
GR_EMU_FETCH(atomicAnd, __atomic_fetch_and, int)
GR_EMU_FETCH(atomicAnd, __atomic_fetch_and, unsigned int)
GR_EMU_FETCH(atomicAnd, __atomic_fetch_and, unsigned long long)
GR_EMU_FETCH(atomicXor, __atomic_fetch_xor, int)
GR_EMU_FETCH(atomicXor, __atomic_fetch_xor, unsigned int)
GR_EMU_FETCH(atomicXor, __atomic_fetch_xor, unsigned long long)
GR_EMU_FETCH(atomicExch, __atomic_exchange_n, int)
GR_EMU_FETCH(atomicExch, __atomic_exchange_n, unsigned int)
GR_EMU_FETCH(atomicExch, __atomic_exchange_n, unsigned long long)
#undef GR_EMU_FETCH
inline float atomicExch(float* p, float v) { float old; __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST); return old; }
inline float atomicAdd(float* p, float v) { return ::gr_emu::atomic_update<float>(p, [](float a, float b) { return a + b; }, v); }
inline double atomicAdd(double* p, double v) { return ::gr_emu::atomic_update<double>(p, [](double a, double b) { return a + b; }, v); }
#define GR_EMU_MINMAX(T)                                                                                       \
    inline T atomicMin(T* p, T v) { return ::gr_emu::atomic_update<T>(p, [](T a, T b) { return b < a ? b : a; }, v); } \
    inline T atomicMax(T* p, T v) { return ::gr_emu::atomic_update<T>(p, [](T a, T b) { return b > a ? b : a; }, v); }
GR_EMU_MINMAX(int)
GR_EMU_MINMAX(unsigned int)
GR_EMU_MINMAX(long long)
GR_EMU_MINMAX(unsigned long long)
#undef GR_EMU_MINMAX
#define GR_EMU_CAS(T)                                                                           \
    inline T atomicCAS(T* p, T compare, T v) {                                                 \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        return compare;                                                                        \
    }
GR_EMU_CAS(int)
GR_EMU_CAS(unsigned int)
GR_EMU_CAS(unsigned long long)
#undef GR_EMU_CAS

// CUDA's min / max for the integer types (and floats); fmin, fmax, isfinite come from <cmath>.
#define GR_EMU_MIN_MAX(T)                         \
    inline T min(T a, T b) { return b < a ? b : a; } \
    inline T max(T a, T b) { return a < b ? b : a; }
GR_EMU_MIN_MAX(int)
GR_EMU_MIN_MAX(unsigned int)
GR_EMU_MIN_MAX(long)
GR_EMU_MIN_MAX(unsigned long)
GR_EMU_MIN_MAX(long long)
GR_EMU_MIN_MAX(unsigned long long)
#undef GR_EMU_MIN_MAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// Set last: the kernels' common.cuh compiles its device-only helpers under it. __CUDA_ARCH__
// stays undefined, so gr_mul, gr_add, gr_widen take their host branches (see the README).
#define __CUDACC__ 1
