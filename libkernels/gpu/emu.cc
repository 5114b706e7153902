/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/emu.cc - the runtime of the CPU emulator of libkernels/gpu/gpu-emu.h (a test
 * tool, see there): one fiber per GPU thread, blocks run in turn.
 *
 * Scheduling: every ready fiber runs until it finishes or waits at a
 * barrier.  When every live fiber of the block waits at __syncthreads, all
 * of them continue; when every live lane of a warp waits at a shuffle, that
 * warp continues.  Anything else with no fiber ready is a divergent barrier:
 * reported, then abort() - acceptable in this never-installed test tool.
 */
#include "gpu-emu.h"
#include "numerics.h" /* §1 decoders: libquant/numerics.h */

#include <setjmp.h>
#include <ucontext.h>

#include <array>
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
/* one slot per thread for the operands of a tensor-core instruction */
std::vector<std::array<uint32_t, 12>> mslot;
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
    mslot.assign(n, std::array<uint32_t, 12>());
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

/* ---- tensor cores ------------------------------------------------------------
 * Each instruction is a warp collective: every lane publishes its operand
 * registers, the warp meets, each lane computes its own outputs from the
 * whole warp's operands (products exact, float32 sums in k order), and the
 * warp meets again before any slot can be overwritten.  The lane layouts
 * below are written from the vendor documents in the direction they state
 * them (element index -> row, column), independently of the kernels'
 * register packing in libkernels/gpu/kernels.cu. */

namespace {

/* Publish N words of this lane; returns the first lane of its warp after
 * checking that the whole warp takes part. */
size_t mma_enter(const uint32_t *w, size_t n)
{
    const size_t me = current, w0 = me - me % GPU_EMU_WARP;

    for (size_t i = 0; i < n; i++)
        mslot[me][i] = w[i];
    wait(WAIT_WARP);
    for (size_t l = w0; l < w0 + GPU_EMU_WARP; l++)
        if (l >= fibers.size() || fibers[l].state == DONE) {
            fprintf(stderr, "gpu-emu: tensor-core instruction without lane %zu\n", l - w0);
            abort();
        }
    return w0;
}

float f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint32_t u32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float bf16(uint32_t h)
{
    return f32((h & 0xFFFFu) << 16);
}

#if GPU_EMU_WARP != 64
/* The instruction's operand formats (§1): the library's one definition,
 * libquant/numerics.h (checked against PyTorch's tables by
 * tests/test-gpu-numerics.c, so the model of the hardware stands on
 * independently tested decoders).  The scale operand is ue4m3, E4M3
 * without a sign: bit 7 is ignored. */
float e2m1(uint32_t nib)
{
    return num_e2m1_value(nib & 15u);
}

float ue4m3(uint32_t b)
{
    return num_e4m3_value(b & 0x7Fu);
}

#endif

} // namespace

#if GPU_EMU_WARP == 64
/* AMD v_mfma_f32_16x16x16bf16_1k (CDNA2) / v_mfma_f32_16x16x16_bf16 (CDNA3),
 * as ROCm's amd_matrix_instruction_calculator prints it: A[i][k] is item
 * k % 4 of lane i + 16 * (k / 4) (items 0, 1 in register 0, low half
 * first), B[k][j] item k % 4 of lane j + 16 * (k / 4), D[i][j] register
 * i % 4 of lane j + 16 * (i / 4). */
void gpu_mma_bf16(float *d, const uint32_t *a, const uint32_t *b)
{
    const uint32_t in[8] = {a[0], a[1], b[0], b[1], u32(d[0]), u32(d[1]), u32(d[2]), u32(d[3])};
    const size_t w0 = mma_enter(in, 8), lane = current - w0;
    float out[4];

    for (int r = 0; r < 4; r++) {
        const int i = (int)(4 * (lane / 16)) + r, j = (int)(lane % 16);
        float acc = f32(mslot[w0 + lane][4 + r]);
        for (int k = 0; k < 16; k++) {
            const uint32_t wa = mslot[w0 + i + 16 * (k / 4)][(k % 4) / 2];
            const uint32_t wb = mslot[w0 + j + 16 * (k / 4)][2 + (k % 4) / 2];
            acc += bf16(k % 2 ? wa >> 16 : wa) * bf16(k % 2 ? wb >> 16 : wb);
        }
        out[r] = acc;
    }
    wait(WAIT_WARP);
    for (int r = 0; r < 4; r++)
        d[r] = out[r];
}
#else
/* NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, PTX ISA
 * 9.7.14.5.8, with g = lane >> 2, t = lane % 4: element a_e (e = 0..7, two
 * per register, low half first) is A[g + 8 * (e in {2,3,6,7})]
 * [2t + (e & 1) + 8 * (e >= 4)]; b_e (e = 0..3) is B[2t + (e & 1) +
 * 8 * (e >= 2)][g]; c_e is C[g + 8 * (e >= 2)][2t + (e & 1)]. */
void gpu_mma_bf16(float *d, const uint32_t *a, const uint32_t *b)
{
    const uint32_t in[10] = {a[0], a[1], a[2], a[3], b[0], b[1],
                             u32(d[0]), u32(d[1]), u32(d[2]), u32(d[3])};
    const size_t w0 = mma_enter(in, 10), lane = current - w0;
    float A[16][16], B[16][8], out[4];

    for (size_t l = 0; l < 32; l++) {
        const int g = (int)(l >> 2), t = (int)(l % 4);
        for (int e = 0; e < 8; e++) {
            const uint32_t w = mslot[w0 + l][e / 2];
            const int row = g + ((e % 4) >= 2 ? 8 : 0), col = 2 * t + (e & 1) + (e >= 4 ? 8 : 0);
            A[row][col] = bf16(e & 1 ? w >> 16 : w);
        }
        for (int e = 0; e < 4; e++) {
            const uint32_t w = mslot[w0 + l][4 + e / 2];
            B[2 * t + (e & 1) + (e >= 2 ? 8 : 0)][g] = bf16(e & 1 ? w >> 16 : w);
        }
    }
    for (int e = 0; e < 4; e++) {
        const int row = (int)(lane >> 2) + (e >= 2 ? 8 : 0), col = 2 * (int)(lane % 4) + (e & 1);
        float acc = f32(mslot[w0 + lane][6 + e]);
        for (int k = 0; k < 16; k++)
            acc += A[row][k] * B[k][col];
        out[e] = acc;
    }
    wait(WAIT_WARP);
    for (int e = 0; e < 4; e++)
        d[e] = out[e];
}

/* NVIDIA mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale
 * .scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 with selectors {0, 0}.
 * Operands, PTX ISA 9.7.14.5.11 (eight E2M1 per register, element 0 in the
 * lowest nibble): a_e (e = 0..31) is A[g + 8 * ((e / 8) odd)][8t + (e & 7) +
 * 32 * (e >= 16)]; b_e (e = 0..15) is B[8t + (e & 7) + 32 * (e >= 8)][g];
 * c_e as for m16n8k16.
 * Scales, PTX ISA 9.7.14.3: .scale_vec::4X gives scale_A 16 x 4 and
 * scale_B 4 x 8, all four bytes of a lane's register used (byte c scales
 * k = 16c .. 16c + 15); thread-id-a = 0 makes the lanes with lane % 4 in
 * {0, 1} supply SF_A and thread-id-b = 0 the lanes with lane % 4 == 0
 * supply SF_B.  Which row each lane of the pair carries (lane % 4 == 0:
 * row g, == 1: row g + 8) is from the ISA's Figure 43, an image; it is the
 * one fact here that could not be read off as text. */
void gpu_mma_fp4(float *d, const uint32_t *a, const uint32_t *b, uint32_t sfa, uint32_t sfb)
{
    const uint32_t in[12] = {a[0], a[1], a[2], a[3], b[0], b[1], sfa, sfb,
                             u32(d[0]), u32(d[1]), u32(d[2]), u32(d[3])};
    const size_t w0 = mma_enter(in, 12), lane = current - w0;
    float A[16][64], B[64][8], SA[16][4], SB[4][8], out[4];

    for (size_t l = 0; l < 32; l++) {
        const int g = (int)(l >> 2), t = (int)(l % 4);
        for (int e = 0; e < 32; e++) {
            const uint32_t nib = (mslot[w0 + l][e / 8] >> (4 * (e % 8))) & 15u;
            A[g + ((e / 8) % 2 ? 8 : 0)][8 * t + (e & 7) + (e >= 16 ? 32 : 0)] = e2m1(nib);
        }
        for (int e = 0; e < 16; e++) {
            const uint32_t nib = (mslot[w0 + l][4 + e / 8] >> (4 * (e % 8))) & 15u;
            B[8 * t + (e & 7) + (e >= 8 ? 32 : 0)][g] = e2m1(nib);
        }
        for (int c = 0; c < 4; c++) {
            if (t < 2)
                SA[g + 8 * t][c] = ue4m3((mslot[w0 + l][6] >> (8 * c)) & 0xFFu);
            if (t == 0)
                SB[c][g] = ue4m3((mslot[w0 + l][7] >> (8 * c)) & 0xFFu);
        }
    }
    for (int e = 0; e < 4; e++) {
        const int row = (int)(lane >> 2) + (e >= 2 ? 8 : 0), col = 2 * (int)(lane % 4) + (e & 1);
        float acc = f32(mslot[w0 + lane][8 + e]);
        for (int k = 0; k < 64; k++)
            acc += (A[row][k] * SA[row][k / 16]) * (B[k][col] * SB[k / 16][col]);
        out[e] = acc;
    }
    wait(WAIT_WARP);
    for (int e = 0; e < 4; e++)
        d[e] = out[e];
}
#endif

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
