#!/bin/sh
# SPDX-License-Identifier: MIT
# Run the GPU backend's kernels on the CPU: libkernels/gpu/kernels.cu and
# libkernels/gpu/backend-gpu.cu compiled by the host C++ compiler against the emulator
# spelling libkernels/gpu/gpu-emu.h (one fiber per GPU thread, see there), loaded by
# libnvfp4-kernels as backend "cuda" from a private directory, and checked by
# tests/test-gpu and tests/test-gpu-model - with 32-lane warps (NVIDIA:
# mma.sync m16n8k16 BF16 and the block-scaled FP4 m16n8k64) and 64-lane
# wavefronts (AMD CDNA: the 16x16x16 BF16 MFMA), the tensor-core
# instructions modelled from their documented lane layouts (libkernels/gpu/emu.cc).  A
# developer check of the kernels' logic on machines without a GPU: indexing,
# tails, reductions, barriers, warp exchanges, fragment packing.  It proves
# nothing about the vendor compilers, timing, or the hardware's own
# accumulation order (see docs/ARCHITECTURE.md, GPU linear paths).
#
#   scripts/gpu-emu-check.sh        (python3, g++; about a minute)
#
# Also one of `make check`'s tests (libkernels/gpu/local.mk): there it uses the build
# tree under test ($top_builddir) and exits 77 (SKIP) without python3/g++.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CXX=${CXX:-g++}
if ! command -v python3 >/dev/null 2>&1 || ! command -v "$CXX" >/dev/null 2>&1; then
    echo "gpu-emu-check: SKIP: needs python3 and $CXX"
    exit 77
fi
if [ -n "${top_builddir:-}" ] && [ -z "${BUILD:-}" ]; then
    # under make check: everything needed is built already
    B=$(cd "$top_builddir" && pwd)
    # A sanitizer build instruments the emulated kernels too, so every
    # device-memory access of every kernel is checked (the "device" is the
    # heap); ASan warns that it cannot follow the fibers' stack switches but
    # reports no false positives on this code.  One warp width: it is slow.
    SAN=$(sed -n 's/^CFLAGS = //p' "$B/Makefile" | tr ' ' '\n' |
        grep -E '^-f(no-)?sanitize|^-fno-omit-frame-pointer' | tr '\n' ' ' || true)
else
    B=${BUILD:-$ROOT/build/gpu-emu}
    mkdir -p "$B"
    cd "$B"
    [ -x "$ROOT/configure" ] || (cd "$ROOT" && autoreconf -fi)
    [ -f Makefile ] || "$ROOT/configure" -q CFLAGS="-O2 -g"
    make -j2 libformat/libnvfp4-format.la libquant/libnvfp4-quant.la \
        libkernels/libnvfp4-kernels.la libmodel/libnvfp4-model.la tests/test-gpu \
        tests/test-gpu-model tools/nvfp4 >/dev/null
fi
E=$B/libkernels/gpu/emu
mkdir -p "$E"

# <<<grid, block, shmem, stream>>> launches -> gpu_emu_launch(..., lambda).
python3 - "$ROOT/libkernels/gpu/kernels.cu" "$E/emu-kernels.cc" <<'EOF'
import sys
src = open(sys.argv[1]).read()
out, i = [], 0
while True:
    j = src.find('<<<', i)
    if j < 0:
        out.append(src[i:])
        break
    # the kernel: identifier, possibly with <template args>, before <<<
    k = j
    if src[k - 1] == '>':
        depth = 0
        while True:
            k -= 1
            if src[k] == '>':
                depth += 1
            elif src[k] == '<':
                depth -= 1
                if depth == 0:
                    break
    while src[k - 1].isalnum() or src[k - 1] == '_':
        k -= 1
    e = src.index('>>>', j)
    cfg = src[j + 3:e]
    a = e + 3
    assert src[a] == '(', src[k:a + 20]
    depth, b = 0, a
    while True:
        if src[b] == '(':
            depth += 1
        elif src[b] == ')':
            depth -= 1
            if depth == 0:
                break
        b += 1
    assert src[b + 1] == ';', src[k:b + 5]
    out.append(src[i:k])
    out.append('gpu_emu_launch(%s, [&] { %s%s; })' % (cfg, src[k:j], src[a:b + 1]))
    i = b + 1
open(sys.argv[2], 'w').write(''.join(out))
EOF

# the device communicator's library: tests/nccl-emu.c (NVFP4_COMM_LIBRARY)
${CC:-cc} -std=c11 -O1 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra ${SAN:-} \
    -o "$E/libnccl-emu.so" "$ROOT/tests/nccl-emu.c" -lrt
# and as a library before NCCL 2.14 (no ncclCommInitRankConfig)
${CC:-cc} -std=c11 -O1 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra ${SAN:-} \
    -DNCCL_EMU_BEFORE_2_14 -o "$E/libnccl-emu-old.so" "$ROOT/tests/nccl-emu.c" -lrt

status=0
SAN=${SAN:-}
WARPS="32 64"
[ -n "$SAN" ] && WARPS=32
for warp in $WARPS; do
    d="$E/warp$warp"
    mkdir -p "$d"
    flags="-std=c++17 -O1 -g -fPIC -ffp-contract=off -U_FORTIFY_SOURCE -fvisibility=hidden -Wall -Wextra \
        -Wno-unused-parameter -DNVFP4_GPU_EMU -DGPU_EMU_WARP=$warp -DNVFP4_BUILDING \
        -DHAVE_CONFIG_H -I$B -I$ROOT/include -I$ROOT/libkernels/gpu -I$ROOT/libquant $SAN"
    $CXX $flags -c "$E/emu-kernels.cc" -o "$d/kernels.o"
    $CXX $flags -x c++ -c "$ROOT/libkernels/gpu/backend-gpu.cu" -o "$d/backend.o"
    $CXX $flags -c "$ROOT/libkernels/gpu/emu.cc" -o "$d/emu.o"
    $CXX $flags -x c++ -c "$ROOT/libkernels/gpu/comm-gpu.cu" -o "$d/comm.o"
    $CXX -shared $SAN -o "$d/nvfp4-backend-cuda.so" "$d/kernels.o" "$d/backend.o" "$d/emu.o" \
        "$d/comm.o" \
        -Wl,--no-undefined -Wl,--version-script="$ROOT/libkernels/gpu/nvfp4-backend.sym" \
        -L"$B/libquant/.libs" -L"$B/libformat/.libs" -lnvfp4-quant -lnvfp4-format -lm -ldl \
        -lpthread
    echo "gpu-emu-check: warp $warp"
    NVFP4_BACKEND_PATH="$d" NVFP4_TEST_GPU_BACKEND=cuda NVFP4_COMM_LIBRARY="$E/libnccl-emu.so" \
        LD_LIBRARY_PATH="$B/libquant/.libs:$B/libformat/.libs:$B/libkernels/.libs" \
        "$B/tests/test-gpu" >"$d/test-gpu.log" 2>&1 || status=1
    tail -n 30 "$d/test-gpu.log"
    grep -q '100%: Checks' "$d/test-gpu.log" || status=1
    # whole fixture models through the emulated backend (tests/test-gpu-model.c)
    if [ -x "$B/tests/test-gpu-model" ]; then
        # under a sanitizer one model (MoE with a shared expert: every op) -
        # the six take ten minutes there.  64-lane wavefronts run a subset
        # that reaches every kernel and path the fixtures do (W4A4, W4A16,
        # a BF16 shard beside NVFP4 ones, QK norm, MoE with a shared
        # expert, FP8 KV pools, sliding window and GELU, DeepSeek's routing
        # bias, gpt-oss's sinks and biased clamped SwiGLU experts); the
        # rest differ in how a checkpoint is read, not in what runs on the
        # device, and 32-lane warps run them all.
        models=
        [ "$warp" = 64 ] &&
            models=llama,llama_w4a16,qwen3,qwen2_moe,llama_excl_gate,llama_kvfp8,gemma3,deepseek_v3,gpt_oss
        [ -n "$SAN" ] && models=qwen2_moe
        NVFP4_BACKEND_PATH="$d" NVFP4_TEST_GPU_BACKEND=cuda NVFP4_TEST_GPU_MODELS="$models" \
            LD_LIBRARY_PATH="$B/libmodel/.libs:$B/libquant/.libs:$B/libformat/.libs:$B/libkernels/.libs" \
            "$B/tests/test-gpu-model" >"$d/test-gpu-model.log" 2>&1 || status=1
        tail -n 30 "$d/test-gpu-model.log"
        grep -q '100%: Checks' "$d/test-gpu-model.log" || status=1
    fi
done

# The device communicator under MPI (libkernels/gpu/comm-gpu.cu over
# tests/nccl-emu.c, 32-lane warps; not in a sanitizer build: slow there and
# Open MPI's own leaks): -np 2 logits through NCCL's collectives (the
# embedding's, o_proj's and the MLP's all-reduces, the logits' all-gather)
# equal the single process's within mpi.test's 2e-5, and a rank whose open fails
# between the id's broadcast and the init (NVFP4_TEST_DEVICE_COMM_FAIL) ends
# the job with exit status 1 naming it, after the others' init deadline
# (NVFP4_COMM_TIMEOUT=3) instead of hanging there.
if [ -z "$SAN" ] && grep -q '^#define HAVE_MPI 1' "$B/config.h" 2>/dev/null &&
    command -v mpirun >/dev/null 2>&1 && [ -x "$B/tools/nvfp4" ]; then
    d="$E/warp32"
    m="$ROOT/tests/data/models/llama"
    toks=$(python3 -c "import json, sys
print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$m/reference.json")
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    export NVFP4_BACKEND=cuda NVFP4_BACKEND_PATH="$d" NVFP4_COMM_LIBRARY="$E/libnccl-emu.so"
    LD_LIBRARY_PATH="$B/libmodel/.libs:$B/libquant/.libs:$B/libformat/.libs"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/libkernels/.libs"
    unset NVFP4_COMM NVFP4_COMM_TIMEOUT NVFP4_DEVICE_COMM NVFP4_TEST_DEVICE_COMM_FAIL
    X="-x NVFP4_BACKEND -x NVFP4_BACKEND_PATH -x NVFP4_COMM_LIBRARY -x LD_LIBRARY_PATH"
    echo "gpu-emu-check: the device communicator under mpirun"
    if ! "$B/tools/nvfp4" logits "$m" --tokens "$toks" --out "$E/mpi.1" 2>"$E/mpi.err"; then
        echo "FAIL: emulated logits, one process"; cat "$E/mpi.err"; status=1
    elif ! NVFP4_NCCL_EMU_TRACE=1 timeout -k 5 120 mpirun --oversubscribe $X \
            -x NVFP4_NCCL_EMU_TRACE -np 2 "$B/tools/nvfp4" logits "$m" --tokens "$toks" \
            --out "$E/mpi.2" >/dev/null 2>"$E/mpi.err"; then
        echo "FAIL: emulated logits, mpirun -np 2"; cat "$E/mpi.err"; status=1
    else
        grep -q 'nccl-emu: rank 1 of 2: init (non-blocking)' "$E/mpi.err" &&
            grep -q 'nccl-emu: rank 1: all-reduce' "$E/mpi.err" &&
            grep -q 'nccl-emu: rank 1: all-gather' "$E/mpi.err" ||
            { echo "FAIL: -np 2 did not run NCCL's non-blocking init, all-reduce, all-gather"
              head -n 20 "$E/mpi.err"; status=1; }
        python3 - "$E/mpi.1" "$E/mpi.2" <<'PYEOF' || status=1
import array, sys
a, b = (array.array('f', open(p, 'rb').read()) for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else float('inf')
print("gpu-emu-check: -np 2 over the device communicator: %d logits, max |diff| %.3g "
      "against one process (bit-identical %s)" % (len(a), d, a.tobytes() == b.tobytes()))
sys.exit(0 if d <= 2e-5 else 1)
PYEOF
    fi
    # a vocabulary that does not divide by the ranks (500 + 501 rows): the
    # logits' all-gather pads to equal counts
    mkdir -p "$E/odd"
    cat > "$E/odd/like.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1001,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}
JSON
    if ! "$B/tools/nvfp4" synth --like "$E/odd/like.json" --out "$E/odd/m" >"$E/mpi.err" 2>&1 ||
        ! "$B/tools/nvfp4" logits "$E/odd/m" --tokens 5,1000,999,7,500 --out "$E/odd/l1" ||
        ! timeout -k 5 120 mpirun --oversubscribe $X -np 2 "$B/tools/nvfp4" logits "$E/odd/m" \
            --tokens 5,1000,999,7,500 --out "$E/odd/l2" >/dev/null 2>"$E/mpi.err"; then
        echo "FAIL: a vocabulary of 1001 over 2 ranks"; cat "$E/mpi.err"; status=1
    else
        python3 - "$E/odd/l1" "$E/odd/l2" <<'PYEOF' || status=1
import array, sys
a, b = (array.array('f', open(p, 'rb').read()) for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 5 * 1001 else float('inf')
print("gpu-emu-check: a vocabulary of 1001 over 2 ranks: max |diff| %.3g" % d)
sys.exit(0 if d <= 2e-5 else 1)
PYEOF
    fi
    # a library before 2.14: the blocking init, and rank 0 says so
    if ! NVFP4_COMM_LIBRARY="$E/libnccl-emu-old.so" NVFP4_NCCL_EMU_TRACE=1 timeout -k 5 120 \
            mpirun --oversubscribe $X -x NVFP4_NCCL_EMU_TRACE -np 2 "$B/tools/nvfp4" logits \
            "$m" --tokens "$toks" --out "$E/mpi.3" >/dev/null 2>"$E/mpi.err" ||
        ! cmp -s "$E/mpi.2" "$E/mpi.3"; then
        echo "FAIL: -np 2 over a library before 2.14 (logits: the same bits as over 2.14)"
        cat "$E/mpi.err"; status=1
    fi
    grep -q 'nccl-emu: rank 1 of 2: init (blocking)' "$E/mpi.err" &&
        grep -q 'nvfp4: note: nccl: the library has no ncclCommInitRankConfig' "$E/mpi.err" ||
        { echo "FAIL: a library before 2.14: no blocking init, or not said"; status=1; }
    # no library on any rank: a warning, and the collectives through host
    # memory (MPI)
    if ! NVFP4_COMM_LIBRARY="$E/no-such-libnccl.so" timeout -k 5 120 mpirun --oversubscribe \
            $X -np 2 "$B/tools/nvfp4" logits "$m" --tokens "$toks" --out "$E/mpi.4" \
            >/dev/null 2>"$E/mpi.err"; then
        echo "FAIL: -np 2 without the library"; cat "$E/mpi.err"; status=1
    fi
    grep -q "warning: nccl on rank 0: cannot load .*no-such-libnccl.so.*through host memory" \
        "$E/mpi.err" ||
        { echo "FAIL: without the library: no warning"; cat "$E/mpi.err"; status=1; }
    python3 - "$E/mpi.1" "$E/mpi.4" <<'PYEOF' || status=1
import array, sys
a, b = (array.array('f', open(p, 'rb').read()) for p in sys.argv[1:3])
d = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else float('inf')
print("gpu-emu-check: -np 2 without the library (host staging): max |diff| %.3g" % d)
sys.exit(0 if d <= 2e-5 else 1)
PYEOF
    rc=0
    t0=$(date +%s)
    NVFP4_TEST_DEVICE_COMM_FAIL=1 NVFP4_COMM_TIMEOUT=3 timeout -k 5 60 mpirun --oversubscribe \
        $X -x NVFP4_TEST_DEVICE_COMM_FAIL -x NVFP4_COMM_TIMEOUT -np 2 "$B/tools/nvfp4" logits \
        "$m" --tokens "$toks" --out "$E/mpi.x" >/dev/null 2>"$E/mpi.err" || rc=$?
    echo "gpu-emu-check: a rank's open fails: exit $rc after $(($(date +%s) - t0)) s"
    cat "$E/mpi.err"
    [ "$rc" -eq 1 ] || { echo "FAIL: a failing open: exit status $rc, expected 1"; status=1; }
    grep -q 'could not be set up: rank 1 of 2 failed: nccl on rank 1: the open failed' \
        "$E/mpi.err" || { echo "FAIL: a failing open: rank 1 is not named"; status=1; }
fi
exit $status
