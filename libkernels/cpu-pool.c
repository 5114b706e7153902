/* SPDX-License-Identifier: MIT */
/* The CPU backend's worker threads (nvfp4k_cpu_par()).
 *
 * A parallel loop is cut into chunks that the calling thread and the
 * workers claim one at a time from an atomic counter; the caller runs
 * chunks too and then waits only for the chunks that were claimed and are
 * still running.  A worker the OS has not scheduled yet claims nothing and
 * is not waited for: on a busy machine (more runnable threads than cores)
 * the loop then costs what it costs on the threads that do run, where an
 * OpenMP region's closing barrier waits until every thread of the team got
 * a core.  Idle workers spin for CPU_POOL_SPIN_NS, then sleep on a
 * condition variable; the caller signals only when one sleeps.
 *
 * Spinning pays on a quiet machine (a sleeping worker takes tens of
 * microseconds to wake, in a virtual machine more) and costs on a busy
 * one: a spinning thread uses up its share of a core, so the scheduler
 * preempts it, or the caller, in the middle of a chunk, and the others
 * wait for it.  So the caller looks at the number of runnable threads on
 * the machine (Linux: the fourth field of /proc/loadavg) once per
 * CPU_POOL_LOAD_NS: when the others, with this loop's threads, outnumber
 * the online CPUs in half of the recent looks, the machine counts as busy.
 * Then idle workers sleep at once, and a caller left waiting for a claimed
 * chunk sleeps too, so that its core is free for the thread it waits for;
 * a thread that sleeps rather than spins also keeps the scheduler's credit
 * for the next time it wakes.  Where that count cannot be read, the pool
 * spins as on a quiet machine.
 *
 * Which thread runs a chunk changes no result: every loop given to the pool
 * computes each of its items (an output row, a token, a head) with the same
 * operations whoever runs it.
 *
 * The job lives in the pool: its generation and the number of chunks not
 * yet claimed share one 64-bit word (`next`), so a claim is one
 * compare-and-swap that fails for a finished or newer job; the caller
 * rewrites the job only after every chunk of the last one is done. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu-internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(NVFP4_CPU_GENERIC)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle worker spins before it sleeps, and how long the caller
 * spins on a claimed chunk before it yields its core each time around. */
#define CPU_POOL_SPIN_NS 200000
#define CPU_POOL_WAIT_SPIN_NS 50000
/* Chunks per participating thread: the last ones to finish are short. */
#define CPU_POOL_CHUNKS 16
/* How often the caller looks at the machine's load. */
#define CPU_POOL_LOAD_NS 1000000u

struct cpu_pool {
    pthread_mutex_t run;   /* one caller at a time (trylock) */
    pthread_mutex_t lock;  /* sleeping and waking */
    pthread_cond_t wake;
    pthread_cond_t finished; /* the caller sleeps on it (busy machine) */
    pthread_t *tids;
    int nworkers;
    /* atomics */
    uint64_t next;         /* generation << 32 | chunks not yet claimed */
    uint64_t done;         /* chunks finished in this generation */
    int want;              /* workers 0 .. want-1 take part */
    int sleepers;
    int caller_sleeps;
    int busy;              /* the machine is busy: no spinning */
    int quit;
    /* the job; written by the caller between generations only */
    cpu_par_fn fn;
    void *arg;
    size_t n;
    uint32_t nchunks;
    /* the load watch; the caller's, with `run` held */
    int loadavg;           /* /proc/loadavg, or -1 */
    int ncpu;
    uint64_t load_t0;
    unsigned load;         /* 0 .. 256: recent looks that saw a busy machine */
};

typedef struct {
    cpu_pool *p;
    int id;
} pool_worker;

static uint64_t pool_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claims and runs chunks of generation GEN until none is left. */
static void pool_work(cpu_pool *p, uint32_t gen, int slot)
{
    uint64_t v = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);

    for (;;) {
        uint32_t left = (uint32_t)v, c, nch;
        size_t i0, i1;

        if ((uint32_t)(v >> 32) != gen || left == 0)
            return;
        if (!__atomic_compare_exchange_n(&p->next, &v, v - 1, 1, __ATOMIC_ACQUIRE,
                                         __ATOMIC_ACQUIRE))
            continue;
        /* the job is this generation's until its last chunk is done */
        nch = p->nchunks;
        c = nch - left;
        i0 = p->n * c / nch;
        i1 = p->n * (c + 1) / nch;
        p->fn(p->arg, i0, i1, slot);
        if (__atomic_add_fetch(&p->done, 1, __ATOMIC_SEQ_CST) == nch &&
            __atomic_load_n(&p->caller_sleeps, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->lock);
        }
        v = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
    }
}

static void *pool_main(void *varg)
{
    pool_worker *me = varg;
    cpu_pool *p = me->p;
    const int id = me->id;
    uint32_t seen = (uint32_t)(__atomic_load_n(&p->next, __ATOMIC_ACQUIRE) >> 32);

    free(me);
    for (;;) {
        const uint64_t spin = __atomic_load_n(&p->busy, __ATOMIC_RELAXED) ? 0 : CPU_POOL_SPIN_NS;
        uint64_t t0 = 0;
        uint32_t gen;
        unsigned spins = 0;

        /* wait for a new generation: spin, then sleep */
        while ((gen = (uint32_t)(__atomic_load_n(&p->next, __ATOMIC_ACQUIRE) >> 32)) == seen &&
               !__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE)) {
            cpu_relax();
            if (++spins % 64)
                continue;
            if (!t0)
                t0 = pool_ns();
            else if (pool_ns() - t0 > spin) {
                pthread_mutex_lock(&p->lock);
                __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
                while ((uint32_t)(__atomic_load_n(&p->next, __ATOMIC_SEQ_CST) >> 32) == seen &&
                       !__atomic_load_n(&p->quit, __ATOMIC_SEQ_CST))
                    pthread_cond_wait(&p->wake, &p->lock);
                __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
                pthread_mutex_unlock(&p->lock);
                t0 = 0;
            }
        }
        if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE))
            return NULL;
        seen = gen;
        if (id < __atomic_load_n(&p->want, __ATOMIC_RELAXED))
            pool_work(p, gen, id + 1);
    }
}

static void pool_stop(cpu_pool *p)
{
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&p->quit, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->tids[i], NULL);
    p->nworkers = 0;
}

void nvfp4k_cpu_pool_free(cpu_pool *p)
{
    if (!p)
        return;
    pool_stop(p);
    if (p->loadavg >= 0)
        close(p->loadavg);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run);
    free(p->tids);
    free(p);
}

static cpu_pool *pool_new(void)
{
    cpu_pool *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->run, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        pthread_mutex_destroy(&p->run);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->run);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->finished, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->run);
        free(p);
        return NULL;
    }
    p->loadavg = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    p->ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return p;
}

/* With p->run held: at least WANT workers, or as many as could start. */
static void pool_grow(cpu_pool *p, int want)
{
    pthread_t *t;

    if (p->nworkers >= want)
        return;
    t = realloc(p->tids, (size_t)want * sizeof(*t));
    if (!t)
        return;
    p->tids = t;
    while (p->nworkers < want) {
        pool_worker *w = malloc(sizeof(*w));
        if (!w)
            return;
        w->p = p;
        w->id = p->nworkers;
        if (pthread_create(&p->tids[p->nworkers], NULL, pool_main, w) != 0) {
            free(w);
            return;
        }
        p->nworkers++;
    }
}

/* With p->run held, before a loop on NTH threads: whether the machine is
 * busy (the threads that would run beside this loop's NTH, with them,
 * outnumber the CPUs), smoothed over the last looks. */
static void pool_watch_load(cpu_pool *p, int nth)
{
    char buf[128], *slash;
    uint64_t now;
    ssize_t len;
    long running, others;

    if (p->loadavg < 0 || p->ncpu < 1)
        return;
    now = pool_ns();
    if (now - p->load_t0 < CPU_POOL_LOAD_NS)
        return;
    p->load_t0 = now;
    /* "0.52 0.58 0.59 3/345 12345": runnable threads / all threads */
    len = pread(p->loadavg, buf, sizeof(buf) - 1, 0);
    if (len <= 0)
        return;
    buf[len] = '\0';
    slash = strchr(buf, '/');
    if (!slash)
        return;
    while (slash > buf && slash[-1] >= '0' && slash[-1] <= '9')
        slash--;
    running = strtol(slash, NULL, 10);
    /* less this thread and the workers awake now */
    others = running - 1 - (p->nworkers - __atomic_load_n(&p->sleepers, __ATOMIC_RELAXED));
    p->load = p->load - p->load / 8 + (others + nth > p->ncpu ? 32 : 0);
    __atomic_store_n(&p->busy, p->load >= 128, __ATOMIC_RELAXED);
}

int nvfp4k_cpu_pool_busy(cpu_ctx *c)
{
    cpu_pool *p = __atomic_load_n(&c->pool, __ATOMIC_ACQUIRE);

    return p && __atomic_load_n(&p->busy, __ATOMIC_RELAXED);
}

/* With p->run held, the machine busy: sleeps until the NCH chunks of the
 * job are done. */
static void pool_sleep_done(cpu_pool *p, uint32_t nch)
{
    pthread_mutex_lock(&p->lock);
    __atomic_store_n(&p->caller_sleeps, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&p->done, __ATOMIC_SEQ_CST) != nch)
        pthread_cond_wait(&p->finished, &p->lock);
    __atomic_store_n(&p->caller_sleeps, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&p->lock);
}

/* The loop without the pool (another thread holds it): OpenMP, as before. */
static void par_omp(size_t n, int nth, cpu_par_fn fn, void *arg)
{
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nth)
    for (size_t i = 0; i < n; i++)
        fn(arg, i, i + 1, omp_get_thread_num());
#else
    (void)nth;
    fn(arg, 0, n, 0);
#endif
}

void nvfp4k_cpu_par(cpu_ctx *c, size_t n, int nth, cpu_par_fn fn, void *arg)
{
    cpu_pool *p;
    uint32_t gen, nch;
    uint64_t t0 = 0;
    unsigned spins = 0;

    if (n == 0)
        return;
    if (nth <= 1 || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    /* the pool once made stays until the context closes: no lock per call
     * after the first (a decode step makes some 200 of these calls) */
    p = __atomic_load_n(&c->pool, __ATOMIC_ACQUIRE);
    if (!p) {
        pthread_mutex_lock(&c->pool_lock);
        if (!c->pool)
            __atomic_store_n(&c->pool, pool_new(), __ATOMIC_RELEASE);
        p = c->pool;
        pthread_mutex_unlock(&c->pool_lock);
    }
    if (!p || pthread_mutex_trylock(&p->run) != 0) {
        par_omp(n, nth, fn, arg);
        return;
    }
    pool_grow(p, nth - 1);
    if (p->nworkers == 0) {
        pthread_mutex_unlock(&p->run);
        par_omp(n, nth, fn, arg);
        return;
    }
    if (nth - 1 > p->nworkers)
        nth = p->nworkers + 1;
    pool_watch_load(p, nth);
    nch = (uint32_t)(n < (size_t)nth * CPU_POOL_CHUNKS ? n : (size_t)nth * CPU_POOL_CHUNKS);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->nchunks = nch;
    __atomic_store_n(&p->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->want, nth - 1, __ATOMIC_RELAXED);
    gen = (uint32_t)(__atomic_load_n(&p->next, __ATOMIC_RELAXED) >> 32) + 1;
    __atomic_store_n(&p->next, (uint64_t)gen << 32 | nch, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    pool_work(p, gen, 0);
    /* only chunks that some thread claimed are left */
    while (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) != nch) {
        cpu_relax();
        if (++spins % 64)
            continue;
        if (!t0)
            t0 = pool_ns();
        else if (pool_ns() - t0 > CPU_POOL_WAIT_SPIN_NS) {
            if (__atomic_load_n(&p->busy, __ATOMIC_RELAXED))
                pool_sleep_done(p, nch);
            else
                sched_yield();
        }
    }
    pthread_mutex_unlock(&p->run);
}
