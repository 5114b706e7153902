/*
 * Whole fixture models on a GPU backend (CUDA or HIP, or the CPU emulator of
 * scripts/gpu-emu-check.sh) against the PyTorch emulation of the spec, the
 * same references and the same 1e-4 logit tolerance as tests/test-model.c
 * wherever the GPU computes in float32:
 *
 *   prefill, float32 tiled GEMM   NVFP4_GPU_LINEAR=tiled pins the portable
 *                                 GEMM (float32 tiles, float32 accumulation)
 *   decode                        one token at a time through the KV cache:
 *                                 the GEMV (weights dequantized in registers,
 *                                 float32), the attention decode kernels
 *   greedy continuation           the reference's, token for token
 *
 * (the float32 prefill also against the CPU backend's logits: both lie
 * within the tolerance of PyTorch's, so within twice it of each other),
 *
 * and the default prefill path, which on tensor-core GPUs rounds the GEMM
 * tiles to BF16 (8 significant bits, float32 accumulation): there every
 * product carries a relative error up to 2^-8, which W4A4's activation
 * quantization then turns into occasional flipped E2M1 roundings (each
 * moving a logit by ~1e-2).  Its bound, BF16_TOL absolute on logits of
 * magnitude ~3 with mean |diff| below BF16_MEAN, still fails on any
 * semantic error (a wrong scale, a missing qdq or a wrong rope all move
 * every logit by O(1)).
 *
 * $NVFP4_TEST_GPU_BACKEND picks the backend, else the first available of
 * cuda and hip; without one the test reports SKIP (77).
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/kernels.h>
#include <nvfp4/model.h>

#include "modelref.h"
#include "testutil.h"

#define LOGIT_TOL 1e-4
#define BF16_TOL 0.25
#define BF16_MEAN 0.02

static const char *gpu_name;

static nvfp4_model *open_gpu(const char *name)
{
    nvfp4_error err;
    nvfp4_model *m = fixture_open(name, gpu_name, 0, &err);

    ck_assert_msg(m != NULL, "%s on %s: %s", name, gpu_name, err.text);
    return m;
}

/* Prefill of all tokens with the linear path LINEAR (NULL: the default). */
static float *prefill(const char *name, const fixture *f, const char *linear)
{
    nvfp4_error err;
    nvfp4_model *m;
    float *logits = malloc(f->T * f->V * sizeof(float));
    nvfp4_status st;

    if (linear)
        setenv("NVFP4_GPU_LINEAR", linear, 1);
    else
        unsetenv("NVFP4_GPU_LINEAR");
    m = open_gpu(name);
    st = nvfp4_model_forward(m, f->tokens, f->T, 0, logits, 0, &err);
    unsetenv("NVFP4_GPU_LINEAR");
    ck_assert_msg(st == NVFP4_OK, "%s: %s", name, err.text);
    nvfp4_model_free(m);
    return logits;
}

START_TEST(test_prefill_f32)
{
    const char *name = ok_models[_i];
    fixture f;
    char what[80];
    float *logits;

    nvfp4_model *cpu;
    nvfp4_error err;
    float *cpu_logits;

    fixture_load(name, &f);
    logits = prefill(name, &f, "tiled");
    snprintf(what, sizeof(what), "%s %s prefill (tiled)", gpu_name, name);
    compare_logits(what, logits, f.logits, f.T * f.V, LOGIT_TOL);
    /* and against the CPU backend: both lie within LOGIT_TOL of PyTorch */
    cpu = fixture_open(name, "cpu", 0, &err);
    ck_assert_msg(cpu != NULL, "%s on cpu: %s", name, err.text);
    cpu_logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(cpu, f.tokens, f.T, 0, cpu_logits, 0, &err), NVFP4_OK);
    snprintf(what, sizeof(what), "%s %s prefill vs cpu", gpu_name, name);
    compare_logits(what, logits, cpu_logits, f.T * f.V, 2 * LOGIT_TOL);
    free(cpu_logits);
    nvfp4_model_free(cpu);
    free(logits);
    fixture_free(&f);
}
END_TEST

START_TEST(test_prefill_default)
{
    const char *name = ok_models[_i];
    fixture f;
    char what[80];
    float *logits;
    double mx, mean = 0;
    size_t at, agree = 0;

    fixture_load(name, &f);
    logits = prefill(name, &f, NULL);
    snprintf(what, sizeof(what), "%s %s prefill (default)", gpu_name, name);
    mx = logits_max_diff(what, logits, f.logits, f.T * f.V, &at);
    for (size_t i = 0; i < f.T * f.V; i++)
        mean += fabs((double)logits[i] - (double)f.logits[i]);
    mean /= (double)(f.T * f.V);
    for (size_t t = 0; t < f.T; t++) {
        size_t a = 0, b = 0;
        for (size_t v = 1; v < f.V; v++) {
            if (logits[t * f.V + v] > logits[t * f.V + a])
                a = v;
            if (f.logits[t * f.V + v] > f.logits[t * f.V + b])
                b = v;
        }
        agree += a == b;
    }
    fprintf(stderr, "%-34s argmax agrees on %zu of %zu positions\n", what, agree, f.T);
    ck_assert_msg(mx <= BF16_TOL, "%s: max |diff| %g at %zu exceeds %g", what, mx, at,
                  BF16_TOL);
    ck_assert_msg(mean <= BF16_MEAN, "%s: mean |diff| %g exceeds %g", what, mean, BF16_MEAN);
    free(logits);
    fixture_free(&f);
}
END_TEST

/* Half prefill (float32 GEMM), then one token at a time. */
START_TEST(test_decode)
{
    const char *name = ok_models[_i];
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *logits;
    size_t half;
    char what[80];

    fixture_load(name, &f);
    half = f.T / 2;
    setenv("NVFP4_GPU_LINEAR", "tiled", 1);
    m = open_gpu(name);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_msg(nvfp4_model_forward(m, f.tokens, half, 0, logits, 0, &err) == NVFP4_OK,
                  "%s: %s", name, err.text);
    unsetenv("NVFP4_GPU_LINEAR");
    snprintf(what, sizeof(what), "%s %s decode", gpu_name, name);
    fixture_decode_rest(m, &f, what, half, logits, LOGIT_TOL);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Greedy continuation through the KV cache equals the reference's (which
 * recomputed the whole sequence for every token). */
START_TEST(test_greedy)
{
    const char *name = ok_models[_i];
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *logits;

    fixture_load(name, &f);
    setenv("NVFP4_GPU_LINEAR", "tiled", 1);
    m = open_gpu(name);
    logits = malloc(f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 1, &err), NVFP4_OK);
    unsetenv("NVFP4_GPU_LINEAR");
    fixture_check_greedy(m, &f, name, logits);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

int main(void)
{
    Suite *s;
    TCase *tc;
    SRunner *sr;
    int failed;
    const char *want = getenv("NVFP4_TEST_GPU_BACKEND");

#ifdef GPU_MODULE_DIR
    setenv("NVFP4_BACKEND_PATH", GPU_MODULE_DIR, 0);
#endif
    if (want && *want)
        gpu_name = nvfp4_backend_available(want) ? want : NULL;
    else
        gpu_name = nvfp4_backend_available("cuda") ? "cuda"
                   : nvfp4_backend_available("hip") ? "hip" : NULL;
    if (!gpu_name) {
        fprintf(stderr, "test-gpu-model: SKIP: no usable GPU backend (%s)\n",
                want && *want ? want : "cuda, hip");
        return 77;
    }
    s = suite_create("gpu-model");
    tc = tcase_create(gpu_name);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_prefill_f32, 0, NOK);
    tcase_add_loop_test(tc, test_prefill_default, 0, NOK);
    tcase_add_loop_test(tc, test_decode, 0, NOK);
    tcase_add_loop_test(tc, test_greedy, 0, NOK);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    /* one process: the GPU runtime cannot be used in a fork()ed child */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
