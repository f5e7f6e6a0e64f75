/*
 * parallel.c -- runs a reference over several threads.
 *
 * The golden tests compare kernels against references over hundreds of
 * million-element shapes; one core would take minutes where the GPU takes
 * milliseconds.  ref_parallel_for hands out chunks of an index range from
 * an atomic counter (so uneven chunks balance themselves) to plain
 * pthreads.  Nothing is shared between calls, so two references may run
 * at once from different threads.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reference.h"

int ref_thread_count(void) {
    const char *env = getenv("TK_REF_THREADS");
    long count = 0;
    if (env && *env)
        count = strtol(env, NULL, 10);
    if (count < 1)
        count = sysconf(_SC_NPROCESSORS_ONLN);
    if (count < 1)
        count = 1;
    if (count > REF_MAX_THREADS)
        count = REF_MAX_THREADS;
    return (int)count;
}

typedef struct parallel_job {
    ref_range_fn *fn;
    void *context;
    int64_t count;
    int64_t chunk;
    atomic_int_fast64_t next; /* first index not yet handed out */
} parallel_job;

static void *parallel_worker(void *argument) {
    parallel_job *job = argument;
    for (;;) {
        int64_t begin = atomic_fetch_add(&job->next, job->chunk);
        if (begin >= job->count)
            break;
        int64_t end = begin + job->chunk < job->count ? begin + job->chunk
                                                      : job->count;
        job->fn(job->context, begin, end);
    }
    return NULL;
}

void ref_parallel_for(int64_t count, int64_t min_per_thread, ref_range_fn *fn,
                      void *context) {
    if (count <= 0)
        return;
    if (min_per_thread < 1)
        min_per_thread = 1;
    int64_t threads = ref_thread_count();
    if (threads > count / min_per_thread)
        threads = count / min_per_thread;
    if (threads < 2) {
        fn(context, 0, count);
        return;
    }
    parallel_job job;
    job.fn = fn;
    job.context = context;
    job.count = count;
    /* about eight chunks per thread: small enough to balance, large
     * enough that the counter is not contended */
    job.chunk = count / (threads * 8);
    if (job.chunk < min_per_thread)
        job.chunk = min_per_thread;
    atomic_init(&job.next, 0);

    pthread_t handles[REF_MAX_THREADS];
    int started = 0;
    for (int64_t t = 1; t < threads; t++) {
        if (pthread_create(&handles[started], NULL, parallel_worker, &job) != 0)
            break; /* fewer threads is still correct */
        started++;
    }
    parallel_worker(&job); /* the calling thread works too */
    for (int t = 0; t < started; t++)
        pthread_join(handles[t], NULL);
}

#define DIFFERENCE_CHUNK ((int64_t)1 << 22)

typedef struct difference_job {
    const unsigned char *a, *b;
    size_t bytes;
    atomic_size_t first; /* smallest differing offset found so far */
} difference_job;

static void find_difference(void *context, int64_t begin, int64_t end) {
    difference_job *job = context;
    for (int64_t chunk = begin; chunk < end; chunk++) {
        size_t start = (size_t)chunk * DIFFERENCE_CHUNK;
        if (start >= atomic_load(&job->first))
            return; /* an earlier difference is already known */
        size_t length = job->bytes - start < (size_t)DIFFERENCE_CHUNK
                            ? job->bytes - start : (size_t)DIFFERENCE_CHUNK;
        if (memcmp(job->a + start, job->b + start, length) == 0)
            continue;
        size_t at = start;
        while (job->a[at] == job->b[at])
            at++;
        size_t known = atomic_load(&job->first);
        while (at < known && !atomic_compare_exchange_weak(&job->first, &known, at))
            ;
        return;
    }
}

size_t ref_first_difference(const void *a, const void *b, size_t bytes) {
    difference_job job;
    job.a = a;
    job.b = b;
    job.bytes = bytes;
    atomic_init(&job.first, SIZE_MAX);
    int64_t chunks = (int64_t)((bytes + DIFFERENCE_CHUNK - 1) / DIFFERENCE_CHUNK);
    ref_parallel_for(chunks, 1, find_difference, &job);
    return atomic_load(&job.first);
}
