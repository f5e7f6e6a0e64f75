/*
 * main.c -- the tkc driver: options, the stages in order, the output.
 *
 *   tkc FILE.tk -o OUT [--emit=cubin|ptx|llvm|ir|header]
 *       [--arch=sm_90a|sm_100a] [--dump-after=PASS|all] [-I DIR]...
 *       [--explain-tma] [--time] [--version] [--help]
 *
 * Stages: frontend_compile (lang/: parse, check, instantiate every kernel
 * instance into IR), pipeline_run (compiler/pipeline.c: the passes with
 * the verifier between them), then one of: ir_print_module, emit_header,
 * codegen_module (LLVM IR or PTX), ptx_to_cubin.
 *
 * Exit status: 0 success; 1 errors in the input (diagnostics printed, or
 * the input cannot be read); 2 usage errors; 3 internal compiler errors
 * (ice(): a verifier failure, LLVM or ptxas rejecting what we generated).
 * The output is written only on success, to OUT.tmp and then renamed, so
 * a failed build never leaves a stale or partial file behind; `-o -`
 * writes text outputs to stdout.  The same input always gives a
 * byte-identical output.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "frontend.h"
#include "ir.h"

#ifndef TKC_VERSION
#define TKC_VERSION "0.0.0-dev"
#endif
#ifndef TKC_STDLIB_DIR
#define TKC_STDLIB_DIR "stdlib"
#endif

#define EXIT_INPUT_ERROR 1
#define EXIT_USAGE 2
#define MAX_INCLUDE_DIRS 64

typedef enum { EMIT_CUBIN, EMIT_PTX, EMIT_LLVM, EMIT_IR, EMIT_HEADER } EmitKind;
static const char *const emit_names[] = {"cubin", "ptx", "llvm", "ir", "header"};

typedef struct Options {
    const char *input;
    const char *output;
    EmitKind emit;
    const char *arch;
    const char *dump_after;
    const char *include_dirs[MAX_INCLUDE_DIRS + 3]; /* + stdlib dirs + NULL */
    int ninclude;
    bool time;
} Options;

static const char usage_text[] =
    "usage: tkc FILE.tk -o OUT [options]\n"
    "\n"
    "Compiles a tile-language module to a cubin (or PTX, LLVM IR, IR, or the\n"
    "C header of its launchers).\n"
    "\n"
    "options:\n"
    "  -o OUT               output file ('-' writes text outputs to stdout)\n"
    "  --emit=KIND          cubin (default), ptx, llvm, ir or header\n"
    "  --arch=ARCH          sm_90a (default) or sm_100a (compile only)\n"
    "  --dump-after=PASS    print each kernel's IR to stderr after PASS\n"
    "                       (a pass name, 'frontend', or 'all')\n"
    "  -I DIR               search DIR for imported modules (repeatable)\n"
    "  --explain-tma        say, as a note at each block-level copy, whether it\n"
    "                       became a TMA copy and if not why (lower_tma)\n"
    "  --time               print the time of each stage to stderr\n"
    "  --version            print the version and exit\n"
    "  --help               print this help and exit\n"
    "\n"
    "passes, in order: check_types lower_tma warp_specialize pipeline_loops\n"
    "  lower_tile_ops infer_layouts lower_gemm lower_parallel simplify\n"
    "  plan_shared vectorize simplify hoist_guards insert_barriers\n"
    "\n"
    "exit status: 0 success, 1 errors in the input, 2 usage error,\n"
    "  3 internal compiler error\n";

static _Noreturn void usage_error(const char *fmt, const char *arg) {
    fputs("tkc: error: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(run 'tkc --help' for usage)\n", stderr);
    exit(EXIT_USAGE);
}

/* Splits `--name=value` / `--name value` style options. */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
    size_t length = strlen(name);
    const char *arg = argv[*i];
    if (strncmp(arg, name, length) != 0) return NULL;
    if (arg[length] == '=') return arg + length + 1;
    if (arg[length] != 0) return NULL;
    if (*i + 1 >= argc) usage_error("option '%s' needs a value", name);
    return argv[++*i];
}

/* <directory of the tkc executable>/../share/tkc/stdlib, if resolvable. */
static const char *installed_stdlib(Arena *arena) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    return arena_printf(arena, "%s/../share/tkc/stdlib", exe);
}

static void parse_options(int argc, char **argv, Options *o, Arena *arena) {
    memset(o, 0, sizeof *o);
    o->emit = EMIT_CUBIN;
    o->arch = "sm_90a";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (strcmp(arg, "--version") == 0) {
            printf("tkc %s (LLVM 22, NVPTX sm_90a/sm_100a)\n", TKC_VERSION);
            exit(0);
        } else if (strcmp(arg, "--time") == 0) {
            o->time = true;
        } else if (strcmp(arg, "-o") == 0) {
            if (i + 1 >= argc) usage_error("option '%s' needs a file name", "-o");
            o->output = argv[++i];
        } else if (strncmp(arg, "-o", 2) == 0 && arg[2] != '-') {
            o->output = arg + 2;
        } else if (strcmp(arg, "-I") == 0 || (strncmp(arg, "-I", 2) == 0 && arg[2])) {
            const char *dir = arg[2] ? arg + 2 : NULL;
            if (!dir) {
                if (i + 1 >= argc) usage_error("option '%s' needs a directory", "-I");
                dir = argv[++i];
            }
            if (o->ninclude >= MAX_INCLUDE_DIRS) usage_error("too many -I options%s", "");
            o->include_dirs[o->ninclude++] = dir;
        } else if ((value = option_value(argc, argv, &i, "--emit"))) {
            int kind = -1;
            for (int k = 0; k < (int)(sizeof emit_names / sizeof emit_names[0]); k++)
                if (strcmp(value, emit_names[k]) == 0) kind = k;
            if (kind < 0)
                usage_error("unknown --emit kind '%s' (cubin, ptx, llvm, ir, header)", value);
            o->emit = (EmitKind)kind;
        } else if ((value = option_value(argc, argv, &i, "--arch"))) {
            if (strcmp(value, "sm_90a") != 0 && strcmp(value, "sm_100a") != 0)
                usage_error("unsupported architecture '%s' (sm_90a or sm_100a)", value);
            o->arch = value;
        } else if (strcmp(arg, "--explain-tma") == 0) {
            pass_explain_tma = true;
        } else if ((value = option_value(argc, argv, &i, "--dump-after"))) {
            if (strcmp(value, "all") != 0 && strcmp(value, "frontend") != 0 &&
                !pipeline_find_pass(value))
                usage_error("--dump-after: unknown pass '%s'", value);
            o->dump_after = value;
        } else if (arg[0] == '-' && arg[1] != 0) {
            usage_error("unknown option '%s'", arg);
        } else {
            if (o->input) usage_error("more than one input file ('%s')", arg);
            o->input = arg;
        }
    }
    if (!o->input) usage_error("no input file%s", "");
    if (!o->output) usage_error("no output file (use -o OUT, or -o - for stdout)%s", "");
    if (strcmp(o->output, "-") == 0 && o->emit == EMIT_CUBIN)
        usage_error("a cubin cannot be written to stdout%s", "");
    /* the standard library comes after every -I */
    o->include_dirs[o->ninclude++] = TKC_STDLIB_DIR;
    const char *installed = installed_stdlib(arena);
    if (installed) o->include_dirs[o->ninclude++] = installed;
    o->include_dirs[o->ninclude] = NULL;
}

/* ---- timing ------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void report_time(const Options *o, const char *stage, double *since) {
    double t = now_ms();
    if (o->time) fprintf(stderr, "tkc: time: %-10s %9.2f ms\n", stage, t - *since);
    *since = t;
}

/* ---- output ------------------------------------------------------------ */

/* Header guard from the output's file name: tk_kernels.h -> TK_KERNELS_H. */
static char *guard_name(Arena *arena, const char *output) {
    if (strcmp(output, "-") == 0) return arena_strdup(arena, "TK_LAUNCHERS_H");
    const char *base = strrchr(output, '/');
    base = base ? base + 1 : output;
    char *guard = arena_printf(arena, "%s%s", (*base >= '0' && *base <= '9') ? "TK_" : "", base);
    for (char *p = guard; *p; p++) {
        unsigned char c = (unsigned char)*p;
        *p = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A')
             : ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? (char)c : '_';
    }
    return guard;
}

static bool write_output(const char *path, const void *data, size_t size) {
    if (strcmp(path, "-") == 0) {
        bool ok = fwrite(data, 1, size, stdout) == size && fflush(stdout) == 0;
        if (!ok) fprintf(stderr, "tkc: error: cannot write to stdout: %s\n", strerror(errno));
        return ok;
    }
    size_t length = strlen(path);
    char *temp = malloc(length + 5);
    if (!temp) ice("out of memory");
    memcpy(temp, path, length);
    memcpy(temp + length, ".tmp", 5);
    FILE *f = fopen(temp, "wb");
    bool ok = f && fwrite(data, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(temp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "tkc: error: cannot write '%s': %s\n", path, strerror(errno));
        unlink(temp);
    }
    free(temp);
    return ok;
}

/* Runs a printer into memory. */
typedef struct Capture {
    char *data;
    size_t size;
    FILE *stream;
} Capture;

static FILE *capture_begin(Capture *c) {
    c->data = NULL;
    c->size = 0;
    c->stream = open_memstream(&c->data, &c->size);
    if (!c->stream) ice("open_memstream failed");
    return c->stream;
}

static void capture_end(Capture *c) {
    if (fclose(c->stream) != 0) ice("cannot capture output");
}

/* ---- main -------------------------------------------------------------- */

int main(int argc, char **argv) {
    Arena *arena = arena_new();
    Options o;
    parse_options(argc, argv, &o, arena);

    FILE *probe = fopen(o.input, "rb");
    if (!probe) {
        fprintf(stderr, "tkc: error: cannot open '%s': %s\n", o.input, strerror(errno));
        return EXIT_INPUT_ERROR;
    }
    fclose(probe);

    Diag diag;
    diag_init(&diag, stderr);
    double clock = now_ms(), start = clock;

    Module *m = frontend_compile(arena, &diag, o.input, o.include_dirs, o.arch);
    report_time(&o, "frontend", &clock);
    if (!m || diag.errors > 0) return EXIT_INPUT_ERROR;
    m->arch = o.arch;

    PipelineOptions pipeline = {o.dump_after, stderr};
    if (!pipeline_run(m, &diag, &pipeline) || diag.errors > 0) return EXIT_INPUT_ERROR;
    report_time(&o, "passes", &clock);

    void *data = NULL;
    size_t size = 0;
    Capture capture;
    switch (o.emit) {
    case EMIT_IR:
        ir_print_module(capture_begin(&capture), m);
        capture_end(&capture);
        data = capture.data;
        size = capture.size;
        break;
    case EMIT_HEADER:
        emit_header(capture_begin(&capture), m, guard_name(arena, o.output));
        capture_end(&capture);
        data = capture.data;
        size = capture.size;
        report_time(&o, "header", &clock);
        break;
    case EMIT_LLVM: case EMIT_PTX: case EMIT_CUBIN: {
        char *text = codegen_module(m, &diag, o.emit == EMIT_LLVM ? CODEGEN_LLVM_IR : CODEGEN_PTX);
        report_time(&o, "codegen", &clock);
        if (!text || diag.errors > 0) return EXIT_INPUT_ERROR;
        if (o.emit != EMIT_CUBIN) {
            data = text;
            size = strlen(text);
            break;
        }
        data = ptx_to_cubin(text, o.arch, &diag, &size);
        free(text);
        report_time(&o, "ptxas", &clock);
        if (!data || diag.errors > 0) return EXIT_INPUT_ERROR;
        break;
    }
    }

    bool ok = write_output(o.output, data, size);
    free(data);
    report_time(&o, "write", &clock);
    if (o.time) fprintf(stderr, "tkc: time: %-10s %9.2f ms\n", "total", now_ms() - start);
    arena_free(arena);
    return ok ? 0 : EXIT_INPUT_ERROR;
}
