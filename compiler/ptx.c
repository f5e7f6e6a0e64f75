/*
 * ptx.c -- PTX text to a cubin through ptxas.
 *
 * ptxas runs whole-program (`-arch=<arch> -O3`, no -c): relocatable
 * compilation would drop setmaxnreg (toolchain.md 5).  It is started with
 * fork/execv, never through a shell, on files made with mkstemp in
 * $TMPDIR (or /tmp), which are removed whatever happens.  The ptxas binary
 * is TKC_PTXAS (set by CMake) unless the environment variable TKC_PTXAS
 * names another.
 *
 * A ptxas failure is a compiler bug (we generated the PTX), so it is an
 * internal error that shows ptxas's own message.  With --warn-on-spills
 * ptxas reports register spills as warnings; those are passed on as tkc
 * warnings because the library's kernels must not spill.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir.h"

#ifndef TKC_PTXAS
#define TKC_PTXAS "/usr/local/cuda/bin/ptxas"
#endif

/* Temporary file names: <dir>/tkc-XXXXXX<suffix>. */
typedef struct TempFile {
    char path[4096];
    int fd;
} TempFile;

static bool temp_create(TempFile *t, const char *suffix) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    int n = snprintf(t->path, sizeof t->path, "%s/tkc-XXXXXX%s", dir, suffix);
    if (n < 0 || (size_t)n >= sizeof t->path) return false;
    t->fd = mkstemps(t->path, (int)strlen(suffix));
    return t->fd >= 0;
}

static bool write_all(int fd, const void *data, size_t size) {
    const char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        size -= (size_t)n;
    }
    return true;
}

/* Reads a whole file into malloc'd memory (NUL-terminated for text). */
static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t capacity = 1 << 16, used = 0;
    char *data = malloc(capacity + 1);
    while (data) {
        size_t n = fread(data + used, 1, capacity - used, f);
        used += n;
        if (used < capacity) break;
        capacity *= 2;
        char *bigger = realloc(data, capacity + 1);
        if (!bigger) free(data);
        data = bigger;
    }
    fclose(f);
    if (!data) return NULL;
    data[used] = 0;
    *size = used;
    return data;
}

/* Prints each "ptxas warning" line of log as a tkc warning; returns how
 * many there were. */
static int report_warnings(const char *log) {
    int count = 0;
    for (const char *line = log; *line;) {
        const char *end = strchr(line, '\n');
        size_t length = end ? (size_t)(end - line) : strlen(line);
        if (length > 0 && strstr(line, "warning") && (size_t)(strstr(line, "warning") - line) < length) {
            fprintf(stderr, "tkc: warning: %.*s\n", (int)length, line);
            count++;
        }
        line += length + (end ? 1 : 0);
    }
    return count;
}

unsigned char *ptx_to_cubin(const char *ptx, const char *arch, Diag *diag,
                            size_t *size) {
    const char *ptxas = getenv("TKC_PTXAS");
    if (!ptxas || !*ptxas) ptxas = TKC_PTXAS;
    char arch_flag[64];
    snprintf(arch_flag, sizeof arch_flag, "-arch=%s", arch ? arch : "sm_90a");

    TempFile in, out, log;
    if (!temp_create(&in, ".ptx")) ice("cannot create a temporary file: %s", strerror(errno));
    if (!temp_create(&out, ".cubin")) {
        unlink(in.path);
        ice("cannot create a temporary file: %s", strerror(errno));
    }
    if (!temp_create(&log, ".log")) {
        unlink(in.path);
        unlink(out.path);
        ice("cannot create a temporary file: %s", strerror(errno));
    }
    bool written = write_all(in.fd, ptx, strlen(ptx));
    close(in.fd);
    close(out.fd);

    int status = -1;
    const char *failure = NULL;
    if (!written) {
        failure = "cannot write the PTX to a temporary file";
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            /* child: stdout and stderr both go to the log */
            dup2(log.fd, STDOUT_FILENO);
            dup2(log.fd, STDERR_FILENO);
            /* --split-compile: ptxas optimises functions on several
             * threads (the library has hundreds of kernels); the cubin
             * does not depend on the thread count */
            char *argv[] = {(char *)ptxas, arch_flag, "-O3", "--warn-on-spills",
                            "--split-compile", "0", in.path, "-o", out.path,
                            NULL};
            execv(ptxas, argv);
            fprintf(stderr, "cannot run %s: %s\n", ptxas, strerror(errno));
            _exit(127);
        }
        if (pid < 0) {
            failure = "fork failed";
        } else {
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
    }
    close(log.fd);

    size_t log_size = 0;
    char *log_text = read_all(log.path, &log_size);
    unsigned char *cubin = NULL;
    bool ok = !failure && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) {
        cubin = (unsigned char *)read_all(out.path, size);
        if (!cubin || *size == 0) failure = "ptxas produced no cubin";
    }
    unlink(in.path);
    unlink(out.path);
    unlink(log.path);

    if (!ok || failure) {
        char message[8192];
        snprintf(message, sizeof message, "%s", log_text ? log_text : "");
        free(log_text);
        free(cubin);
        if (failure) ice("ptxas (%s): %s\n%s", ptxas, failure, message);
        if (WIFSIGNALED(status))
            ice("ptxas (%s) was killed by signal %d\n%s", ptxas, WTERMSIG(status), message);
        ice("ptxas (%s) failed with status %d:\n%s", ptxas, WEXITSTATUS(status), message);
    }
    if (log_text) report_warnings(log_text);
    free(log_text);
    (void)diag;
    return cubin;
}
