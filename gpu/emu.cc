/*
 * gpu/emu.cc - the runtime of the CPU emulator of gpu/gpu-emu.h (a test
 * tool, see there): one fiber per GPU thread, blocks run in turn.
 *
 * Scheduling: every ready fiber runs until it finishes or waits at a
 * barrier.  When every live fiber of the block waits at __syncthreads, all
 * of them continue; when every live lane of a warp waits at a shuffle, that
 * warp continues.  Anything else with no fiber ready is a divergent barrier:
 * reported, then abort() - acceptable in this never-installed test tool.
 */
#include "gpu-emu.h"

#include <setjmp.h>
#include <ucontext.h>

#include <vector>

dim3 gpu_emu_thread, gpu_emu_block, gpu_emu_bdim, gpu_emu_gdim;

namespace {

enum { READY, WAIT_BLOCK, WAIT_WARP, DONE };

/* A fiber starts through its ucontext (one swapcontext) and from then on
 * switches with _setjmp/_longjmp, which save no signal mask: no system call
 * per switch.  Build without _FORTIFY_SOURCE (its longjmp check refuses to
 * jump between stacks). */
struct fiber {
    ucontext_t ctx;
    jmp_buf jb;
    int state;
    bool started;
    std::vector<char> stack;
};

const size_t STACK = 256 * 1024;
std::vector<fiber> fibers;
std::vector<char> dyn_shared;
std::vector<uint32_t> xbuf; /* one slot per thread for warp exchanges */
ucontext_t sched_ctx;
jmp_buf sched_jb;
size_t current;
const std::function<void()> *body;

void fiber_main()
{
    (*body)();
    fibers[current].state = DONE;
    _longjmp(sched_jb, 1);
}

void wait(int state)
{
    fibers[current].state = state;
    if (!_setjmp(fibers[current].jb))
        _longjmp(sched_jb, 1);
}

void run_block(size_t n)
{
    if (fibers.size() < n)
        fibers.resize(n);
    xbuf.assign(n, 0);
    for (size_t i = 0; i < n; i++) {
        fiber &f = fibers[i];
        if (f.stack.size() != STACK)
            f.stack.resize(STACK);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = NULL;
        makecontext(&f.ctx, fiber_main, 0);
        f.state = READY;
        f.started = false;
    }
    for (;;) {
        bool ran = false;
        for (size_t i = 0; i < n; i++) {
            if (fibers[i].state != READY)
                continue;
            current = i;
            gpu_emu_thread = dim3((unsigned)(i % gpu_emu_bdim.x),
                                  (unsigned)(i / gpu_emu_bdim.x % gpu_emu_bdim.y),
                                  (unsigned)(i / (gpu_emu_bdim.x * gpu_emu_bdim.y)));
            if (!_setjmp(sched_jb)) {
                if (!fibers[i].started) {
                    fibers[i].started = true;
                    swapcontext(&sched_ctx, &fibers[i].ctx);
                } else {
                    _longjmp(fibers[i].jb, 1);
                }
            }
            ran = true;
        }
        if (ran)
            continue;
        size_t live = 0, at_block = 0;
        for (size_t i = 0; i < n; i++) {
            live += fibers[i].state != DONE;
            at_block += fibers[i].state == WAIT_BLOCK;
        }
        if (live == 0)
            return;
        if (at_block == live) {
            for (size_t i = 0; i < n; i++)
                if (fibers[i].state == WAIT_BLOCK)
                    fibers[i].state = READY;
            continue;
        }
        bool released = false;
        for (size_t w0 = 0; w0 < n; w0 += GPU_EMU_WARP) {
            size_t wl = 0, ww = 0;
            for (size_t i = w0; i < n && i < w0 + GPU_EMU_WARP; i++) {
                wl += fibers[i].state != DONE;
                ww += fibers[i].state == WAIT_WARP;
            }
            if (wl && ww == wl) {
                for (size_t i = w0; i < n && i < w0 + GPU_EMU_WARP; i++)
                    if (fibers[i].state == WAIT_WARP)
                        fibers[i].state = READY;
                released = true;
            }
        }
        if (!released) {
            fprintf(stderr, "gpu-emu: divergent barrier in block (%u,%u,%u):", gpu_emu_block.x,
                    gpu_emu_block.y, gpu_emu_block.z);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %d", fibers[i].state);
            fprintf(stderr, "\n");
            abort();
        }
    }
}

} // namespace

void gpu_emu_sync_block(void)
{
    wait(WAIT_BLOCK);
}

/* Lane L publishes BITS, waits for its warp, reads lane L ^ MASK's value,
 * and waits again so that no slot is overwritten before everyone read. */
uint32_t gpu_emu_exchange(uint32_t bits, int mask)
{
    const size_t me = current, w0 = me - me % GPU_EMU_WARP;
    const size_t src = w0 + ((me - w0) ^ (size_t)mask);
    uint32_t v;

    xbuf[me] = bits;
    wait(WAIT_WARP);
    if (src >= xbuf.size() || fibers[src].state == DONE) {
        fprintf(stderr, "gpu-emu: shuffle with lane %zu, which has exited\n", src);
        abort();
    }
    v = xbuf[src];
    wait(WAIT_WARP);
    return v;
}

void *gpu_emu_dynamic_shared(void)
{
    return dyn_shared.data();
}

void gpu_emu_launch(dim3 grid, dim3 block, size_t shmem, gpu_stream_t s,
                    const std::function<void()> &b)
{
    const size_t n = (size_t)block.x * block.y * block.z;
    (void)s;
    if (n == 0 || n > 1024 || n % GPU_EMU_WARP) {
        fprintf(stderr, "gpu-emu: block of %zu threads\n", n);
        abort();
    }
    body = &b;
    gpu_emu_gdim = grid;
    gpu_emu_bdim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                gpu_emu_block = dim3(x, y, z);
                /* fresh garbage per block: no block may rely on another's */
                dyn_shared.assign(shmem + 16, (char)0xFF);
                run_block(n);
            }
}
