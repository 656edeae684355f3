/* cuda_emu.cpp: the launch, barrier and atomics of cuda_emu.h.
 *
 * A block's threads are fibers (ucontext, then __builtin_setjmp/longjmp) on the calling thread: the
 * scheduler runs each thread until it reaches __syncthreads or returns,
 * then starts the next round.  A round where some threads returned while
 * others wait at a barrier is a divergent __syncthreads (undefined on a
 * GPU): the launch stops the harness with a message.  Fibers make a
 * barrier cost a few context switches instead of waking 256 OS threads, and
 * make runs deterministic.  Under AddressSanitizer the switches are
 * announced to it (__sanitizer_start_switch_fiber), so it follows the
 * stacks.
 *
 * A switch still costs two system calls (swapcontext saves the signal
 * mask), and most kernels have no barrier: a kernel whose first launch
 * never reached __syncthreads runs its threads as plain calls from then on
 * (a barrier reached that way stops the run with a message: a barrier only
 * some launches reach is one the emulation cannot trust).
 */
#include "cuda_emu.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#endif

dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace
{

const size_t kStack = 256 * 1024;

/* A fiber is made once (makecontext) and lives across blocks and launches:
 * it runs the kernel for its thread of the current block, says it is done,
 * and waits to be resumed for the next block.  Switches are the compiler's
 * __builtin_setjmp / __builtin_longjmp: they leave the signal mask alone (no
 * system call) and no sanitizer intercepts them (AddressSanitizer's longjmp
 * interceptor looks the stack up in /proc on every jump off the thread's
 * stack); only a fiber's first entry goes through swapcontext. */
typedef void *jump_buffer[5];

/* Jump to where env was set: not in the function that set it (GCC's rule). */
[[noreturn]] __attribute__((noinline)) void jump_to(jump_buffer env) { __builtin_longjmp(env, 1); }
struct fiber {
    ucontext_t ctx;
    std::vector<unsigned char> stack;
    jump_buffer env;
    bool started, done;
    void *fake_stack; /* AddressSanitizer's, while switched away */
};

ucontext_t scheduler_ctx;
jump_buffer scheduler_env;
std::vector<fiber> fibers;
unsigned current;
const cuda_emu_kernel *running;
const void *running_args;
std::vector<unsigned char> dyn_shared;
bool in_fiber;                                       /* threads run as fibers (else as plain calls) */
bool saw_barrier;                                    /* this launch reached __syncthreads           */
std::map<const cuda_emu_kernel *, bool> has_barrier; /* learnt at a kernel's first launch */
#ifdef EMU_ASAN
const void *sched_stack_bottom;
size_t sched_stack_size;
void *sched_fake_stack;
#endif

/* Switch from the running fiber back to the scheduler. */
void yield_to_scheduler()
{
    fiber &f = fibers[current];
    if (__builtin_setjmp(f.env) == 0) {
#ifdef EMU_ASAN
        __sanitizer_start_switch_fiber(&f.fake_stack, sched_stack_bottom, sched_stack_size);
#endif
        jump_to(scheduler_env);
    }
#ifdef EMU_ASAN /* resumed: back on this fiber's stack */
    __sanitizer_finish_switch_fiber(fibers[current].fake_stack, &sched_stack_bottom, &sched_stack_size);
#endif
}

void fiber_main()
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
    for (;;) {
        running->run(running_args);
        fibers[current].done = true;
        yield_to_scheduler();
    }
}

/* Run fiber t until it yields or finishes. */
void resume(unsigned t)
{
    current = t;
    threadIdx = dim3{ t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y) };
    if (__builtin_setjmp(scheduler_env) == 0) {
        fiber &f = fibers[t];
#ifdef EMU_ASAN
        __sanitizer_start_switch_fiber(&sched_fake_stack, f.stack.data(), f.stack.size());
#endif
        if (!f.started) {
            f.started = true;
            swapcontext(&scheduler_ctx, &f.ctx); /* does not return: the fiber jumps back */
        }
        jump_to(f.env);
    }
#ifdef EMU_ASAN /* back on the scheduler's stack */
    __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
}

void run_block(unsigned threads)
{
    for (unsigned t = 0; t < threads; t++)
        fibers[t].done = false;
    for (;;) {
        unsigned finished = 0;
        for (unsigned t = 0; t < threads; t++)
            if (!fibers[t].done)
                resume(t);
        for (unsigned t = 0; t < threads; t++)
            finished += fibers[t].done;
        if (finished == threads)
            return;
        if (finished > 0) {
            fprintf(stderr,
                    "cuda_emu: kernel %s: in block (%u,%u,%u) %u of %u threads returned while the others "
                    "wait at __syncthreads (divergent barrier)\n",
                    running->name, blockIdx.x, blockIdx.y, blockIdx.z, finished, threads);
            abort();
        }
    }
}

} // namespace

void __syncthreads()
{
    if (!in_fiber) {
        fprintf(stderr, "cuda_emu: kernel %s reached __syncthreads though its first launch did not\n", running->name);
        abort();
    }
    saw_barrier = true;
    yield_to_scheduler();
}

void *cuda_emu_dyn_shared() { return dyn_shared.data(); }

unsigned long long atomicMin(unsigned long long *address, unsigned long long value)
{
    unsigned long long old = *address; /* one fiber runs at a time: no race */
    if (value < old)
        *address = value;
    return old;
}

void cuda_emu_launch(const cuda_emu_kernel *k, dim3 grid, dim3 block, size_t shared_bytes, const void *args)
{
    gridDim = grid;
    blockDim = block;
    dyn_shared.assign(shared_bytes + 16, 0xA5); /* not zero: a kernel must write before it reads */
    unsigned threads = block.x * block.y * block.z;
    while (fibers.size() < threads) { /* made once; a vector of them never moves a made one */
        fibers.reserve(1024);
        fibers.emplace_back();
        fiber &f = fibers.back();
        f.stack.resize(kStack);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
    running = k;
    running_args = args;
    auto known = has_barrier.find(k);
    in_fiber = known == has_barrier.end() || known->second;
    saw_barrier = false;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dim3{ bx, by, bz };
                if (in_fiber) {
                    run_block(threads);
                    continue;
                }
                for (unsigned t = 0; t < threads; t++) {
                    threadIdx = dim3{ t % block.x, (t / block.x) % block.y, t / (block.x * block.y) };
                    k->run(args);
                }
            }
    if (known == has_barrier.end())
        has_barrier[k] = saw_barrier;
}
