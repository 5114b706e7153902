/* SPDX-License-Identifier: MIT */
/*
 * tests/gpuselect.h - which GPU backend the GPU tests (test-gpu,
 * test-gpu-model) run: $NVFP4_TEST_GPU_BACKEND, else the first available of
 * cuda and hip, the modules taken from the build tree (GPU_MODULE_DIR)
 * unless $NVFP4_BACKEND_PATH says otherwise.  NULL, after a SKIP line naming
 * what is registered, when there is none: the test then exits 77.
 */
#ifndef NVFP4_TEST_GPUSELECT_H
#define NVFP4_TEST_GPUSELECT_H

#include <stdio.h>
#include <stdlib.h>

#include <nvfp4/kernels.h>

static inline const char *gpu_select(const char *prog)
{
    const char *want = getenv("NVFP4_TEST_GPU_BACKEND"), *name;

#ifdef GPU_MODULE_DIR
    setenv("NVFP4_BACKEND_PATH", GPU_MODULE_DIR, 0);
#endif
    if (want && *want)
        name = nvfp4_backend_available(want) ? want : NULL;
    else
        name = nvfp4_backend_available("cuda") ? "cuda"
               : nvfp4_backend_available("hip") ? "hip" : NULL;
    if (!name) {
        fprintf(stderr, "%s: SKIP: no usable GPU backend (%s); registered:", prog,
                want && *want ? want : "cuda, hip");
        for (size_t i = 0; i < nvfp4_backend_count(); i++)
            fprintf(stderr, " %s%s", nvfp4_backend_name_at(i),
                    nvfp4_backend_available(nvfp4_backend_name_at(i)) ? "" : " (no device)");
        fprintf(stderr, "\n");
    }
    return name;
}

#endif /* NVFP4_TEST_GPUSELECT_H */
