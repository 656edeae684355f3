/* cuda_emu.cpp: the launch, barrier and atomics of cuda_emu.h.
 *
 * A block's threads are fibers (ucontext) on the calling thread: the
 * scheduler runs each thread until it reaches __syncthreads or returns,
 * then starts the next round.  A round where some threads returned while
 * others wait at a barrier is a divergent __syncthreads (undefined on a
 * GPU): the launch stops the harness with a message.  Fibers make a
 * barrier cost a few context switches instead of waking 256 OS threads, and
 * make runs deterministic.  Under AddressSanitizer the switches are
 * announced to it (__sanitizer_start_switch_fiber), so it follows the
 * stacks.
 */
#include "cuda_emu.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

namespace {

const size_t kStack = 256 * 1024;

struct fiber {
    ucontext_t                 ctx;
    std::vector<unsigned char> stack;
    bool                       done;
};

ucontext_t              scheduler;
std::vector<fiber>      fibers;
unsigned                current;
const cuda_emu_kernel  *running;
const void             *running_args;
std::vector<unsigned char> dyn_shared;
#ifdef EMU_ASAN
const void *sched_stack_bottom;
size_t      sched_stack_size;
#endif

/* Switch from the running fiber back to the scheduler. */
void yield_to_scheduler(bool finished)
{
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, sched_stack_bottom, sched_stack_size);
#endif
    swapcontext(&fibers[current].ctx, &scheduler);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void fiber_main()
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
    running->run(running_args);
    fibers[current].done = true;
    yield_to_scheduler(true);
}

/* Run fiber t until it yields or finishes. */
void resume(unsigned t)
{
    current = t;
    threadIdx = dim3{ t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y) };
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, fibers[t].stack.data(), fibers[t].stack.size());
#endif
    swapcontext(&scheduler, &fibers[t].ctx);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void run_block(unsigned threads)
{
    for (unsigned t = 0; t < threads; t++) {
        fiber &f = fibers[t];
        f.done = false;   /* getcontext once (a system call); makecontext reuses it */
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
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
            fprintf(stderr, "cuda_emu: kernel %s: in block (%u,%u,%u) %u of %u threads returned while the others "
                            "wait at __syncthreads (divergent barrier)\n",
                    running->name, blockIdx.x, blockIdx.y, blockIdx.z, finished, threads);
            abort();
        }
    }
}

}   // namespace

void __syncthreads() { yield_to_scheduler(false); }

void *cuda_emu_dyn_shared() { return dyn_shared.data(); }

unsigned long long atomicMin(unsigned long long *address, unsigned long long value)
{
    unsigned long long old = *address;   /* one fiber runs at a time: no race */
    if (value < old)
        *address = value;
    return old;
}

void cuda_emu_launch(const cuda_emu_kernel *k, dim3 grid, dim3 block, size_t shared_bytes, const void *args)
{
    gridDim = grid;
    blockDim = block;
    dyn_shared.assign(shared_bytes + 16, 0xA5);   /* not zero: a kernel must write before it reads */
    unsigned threads = block.x * block.y * block.z;
    if (fibers.size() < threads) {
        fibers.resize(threads);
        for (auto &f : fibers) {
            f.stack.resize(kStack);
            getcontext(&f.ctx);
        }
    }
    running = k;
    running_args = args;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dim3{ bx, by, bz };
                run_block(threads);
            }
}
