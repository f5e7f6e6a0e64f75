/*
 * test_passes.c -- golden tests for every compiler pass.
 *
 * Each case is one file, tests/passes/<pass>/<case>.ir:
 *
 *     <input IR text, as ir_print writes it (docs/ir.md)>
 *     // ----- expected
 *     <the IR after running only <pass> over every kernel>
 *
 * or, for a case that must be rejected,
 *
 *     <input IR text>
 *     // ----- error
 *     <the diagnostics the pass prints: file:line:col: error: ..., the
 *      source line and the caret; the file is written as <case>.ir>
 *
 * The pass is found by name with pipeline_find_pass, so a new pass gets
 * goldens by adding a directory.  For an expected case the output must
 * also pass ir_verify (a pass must leave well-formed IR behind).
 *
 * TK_UPDATE_GOLDENS=1 rewrites the part after the marker with what the
 * pass produces now (a file without a marker gets one: "expected" when
 * the pass succeeds, "error" when it fails).  TK_GOLDEN_PASSES=a,b limits
 * a run (and so a rewrite) to the goldens of those passes, e.g.
 *
 *     TK_UPDATE_GOLDENS=1 TK_GOLDEN_PASSES=infer_layouts ./test_passes
 *
 * Review the diff before committing it.
 *
 * Every case is a separate Criterion test (one process each), so a crash
 * or an internal error in one pass fails only its own cases.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define GOLDEN_DIR TK_SOURCE_DIR "/tests/passes"
#define EXPECTED_MARKER "// ----- expected"
#define ERROR_MARKER "// ----- error"

typedef struct {
    char pass[64];   /* directory name = pass name */
    char file[128];  /* case file name, e.g. per_token_cast.ir */
} PassCase;

/* ---- discovery --------------------------------------------------------- */

static int compare_cases(const void *a, const void *b)
{
    const PassCase *x = a, *y = b;
    int c = strcmp(x->pass, y->pass);
    return c ? c : strcmp(x->file, y->file);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Every tests/passes/<pass>/<case>.ir, sorted, in malloc'd memory. */
static PassCase *find_cases(size_t *count)
{
    size_t n = 0, capacity = 64;
    PassCase *cases = malloc(capacity * sizeof *cases);
    DIR *root = opendir(GOLDEN_DIR);
    struct dirent *pass_entry;
    while (root && (pass_entry = readdir(root))) {
        if (pass_entry->d_name[0] == '.' ||
            strlen(pass_entry->d_name) >= sizeof cases->pass)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", GOLDEN_DIR, pass_entry->d_name);
        DIR *dir = opendir(path);
        struct dirent *case_entry;
        while (dir && (case_entry = readdir(dir))) {
            if (!ends_with(case_entry->d_name, ".ir") ||
                strlen(case_entry->d_name) >= sizeof cases->file)
                continue;
            if (n == capacity)
                cases = realloc(cases, (capacity *= 2) * sizeof *cases);
            /* lengths checked above */
            memcpy(cases[n].pass, pass_entry->d_name,
                   strlen(pass_entry->d_name) + 1);
            memcpy(cases[n].file, case_entry->d_name,
                   strlen(case_entry->d_name) + 1);
            n++;
        }
        if (dir)
            closedir(dir);
    }
    if (root)
        closedir(root);
    qsort(cases, n, sizeof *cases, compare_cases);
    *count = n;
    return cases;
}

static void free_cases(struct criterion_test_params *params)
{
    cr_free(params->params);
}

/* ---- one case ---------------------------------------------------------- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    text[got] = 0;
    fclose(f);
    return text;
}

/* The marker line (at the start of a line) and where the text after it
 * begins; NULL when absent. */
static char *find_marker(char *text, const char *marker, char **after)
{
    size_t m = strlen(marker);
    for (char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, marker, m) == 0 && (p[m] == '\n' || p[m] == 0)) {
            *after = p[m] ? p + m + 1 : p + m;
            return p;
        }
    }
    return NULL;
}

/* Trailing blank space is not significant. */
static void trim_end(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
}

/* Line number (1-based) of the first difference, for the failure message. */
static int first_difference(const char *a, const char *b)
{
    int line = 1;
    for (; *a && *a == *b; a++, b++)
        if (*a == '\n')
            line++;
    return line;
}

static void write_golden(const char *path, const char *input, size_t input_len,
                         const char *marker, const char *output)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot rewrite %s", path);
    fwrite(input, 1, input_len, f);
    if (input_len && input[input_len - 1] != '\n')
        fputc('\n', f);
    fprintf(f, "%s\n%s\n", marker, output);
    fclose(f);
}

/* Is the pass named in TK_GOLDEN_PASSES (or is the variable unset)? */
static bool pass_selected(const char *pass)
{
    const char *list = getenv("TK_GOLDEN_PASSES");
    if (!list || !*list)
        return true;
    size_t n = strlen(pass);
    for (const char *p = list; p; p = strchr(p, ','), p = p ? p + 1 : p)
        if (strncmp(p, pass, n) == 0 && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

static void run_case(const PassCase *c)
{
    if (!pass_selected(c->pass))
        cr_skip_test("%s not in TK_GOLDEN_PASSES", c->pass);
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", GOLDEN_DIR, c->pass, c->file);
    char *text = read_file(path);
    cr_assert(text, "cannot read %s", path);
    bool update = getenv("TK_UPDATE_GOLDENS") &&
                  strcmp(getenv("TK_UPDATE_GOLDENS"), "1") == 0;

    char *expected = NULL, *marker_at;
    bool want_error = false;
    if ((marker_at = find_marker(text, ERROR_MARKER, &expected)))
        want_error = true;
    else
        marker_at = find_marker(text, EXPECTED_MARKER, &expected);
    cr_assert(marker_at || update,
              "%s/%s: no '%s' or '%s' line (run with TK_UPDATE_GOLDENS=1)",
              c->pass, c->file, EXPECTED_MARKER, ERROR_MARKER);
    size_t input_len = marker_at ? (size_t)(marker_at - text) : strlen(text);
    char *input = strndup(text, input_len);

    PassFn pass = pipeline_find_pass(c->pass);
    cr_assert(pass, "%s: no pass named '%s'", c->file, c->pass);

    /* diagnostics name the case file only, so goldens do not depend on
     * where the tree is checked out */
    char *diag_text = NULL;
    size_t diag_size = 0;
    FILE *diag_out = open_memstream(&diag_text, &diag_size);
    Diag diag;
    diag_init(&diag, diag_out);
    diag_add_source(&diag, c->file, input);
    Arena *arena = arena_new();
    Module *m = ir_parse(arena, &diag, c->file, input);
    fflush(diag_out);
    cr_assert(m, "%s/%s: the input does not parse:\n%s", c->pass, c->file,
              diag_text);

    bool ok = true;
    for (int i = 0; i < m->nkernels; i++)
        ok &= pass(m->kernels[i], &diag);
    bool verified = true;
    if (ok)
        for (int i = 0; i < m->nkernels; i++)
            verified &= ir_verify(m->kernels[i], &diag, c->pass);
    fflush(diag_out);
    cr_assert(verified || update, "%s/%s: the output does not verify:\n%s",
              c->pass, c->file, diag_text);
    fclose(diag_out);

    char *actual = NULL;
    size_t actual_size = 0;
    if (ok && !want_error) {
        FILE *out = open_memstream(&actual, &actual_size);
        ir_print_module(out, m);
        fclose(out);
    } else {
        actual = strdup(diag_text);
    }
    trim_end(actual);

    if (update) {
        write_golden(path, input, input_len,
                     ok ? EXPECTED_MARKER : ERROR_MARKER, actual);
        cr_log_info("%s/%s: golden rewritten", c->pass, c->file);
        return;
    }
    cr_assert(!want_error || !ok,
              "%s/%s: the pass accepted input it must reject", c->pass,
              c->file);
    cr_assert(want_error || ok, "%s/%s: the pass failed:\n%s", c->pass,
              c->file, diag_text);
    char *want = strdup(expected);
    trim_end(want);
    if (strcmp(want, actual) != 0)
        cr_assert_fail("%s/%s: output differs from the golden at line %d "
                       "after the marker.\n--- expected\n%s\n--- actual\n%s\n"
                       "(TK_UPDATE_GOLDENS=1 rewrites the golden)",
                       c->pass, c->file, first_difference(want, actual), want,
                       actual);
}

ParameterizedTestParameters(passes, golden)
{
    /* the parameters must live in Criterion's shared memory: each case
     * runs in its own process */
    size_t count;
    PassCase *cases = find_cases(&count);
    PassCase *shared = cr_malloc((count ? count : 1) * sizeof *shared);
    memcpy(shared, cases, count * sizeof *cases);
    free(cases);
    return cr_make_param_array(PassCase, shared, count, free_cases);
}

ParameterizedTest(PassCase *c, passes, golden)
{
    cr_log_info("case %s/%s", c->pass, c->file);
    run_case(c);
}

/* The golden directory must exist and hold cases; an empty parameter list
 * would otherwise pass silently. */
Test(passes, goldens_present)
{
    size_t count;
    free(find_cases(&count));
    cr_assert(count >= 4, "only %zu golden cases under %s", count,
              GOLDEN_DIR);
}

/* ===================================================================== */
/* The lowering, executed.                                                */
/* ===================================================================== */

/*
 * Goldens pin down the text; these tests check what the text does.  A
 * kernel with a fragment, a reduce, a loop over the fragment and a loop
 * over the reduced shape goes through lower_tile_ops, infer_layouts and
 * lower_parallel, and the thread-level result is run by a small SIMT
 * interpreter (every thread of the block in lockstep, shuffles exchange
 * values between lanes).  Each configuration checks that every element is
 * loaded and stored exactly once, that each row's reduction is right in
 * every replica, that only replica 0 stores it, and that the thread
 * holding an element is the one the Layout contract in ir.h names.
 */

#define SIM_MAX_THREADS 256

typedef struct {
    const int64_t *extent; /* the tile */
    int rank;
    int threads;
    Kernel *k;
    double *env;          /* [nvars][threads] */
    int nvars;
    PtrVec locals;        /* Buffer* of the LOCAL arrays ... */
    PtrVec local_data;    /* ... and their double[threads][size] */
    double *y, *z;        /* global outputs */
    int *y_writes, *z_writes;
    int *owner;           /* thread that loaded each element of x */
} Sim;

/* Row-major index into the tile of the evaluated indices of thread t;
 * -1 outside the tile. */
static int64_t sim_flat(const Sim *sim, int rank, const double *const *values,
                        int t)
{
    int64_t flat = 0;
    for (int d = 0; d < rank; d++) {
        int64_t i = (int64_t)values[d][t];
        if (i < 0 || i >= sim->extent[d])
            return -1;
        flat = flat * sim->extent[d] + i;
    }
    return flat;
}

static double *sim_local(Sim *sim, const Buffer *b)
{
    for (int i = 0; i < sim->locals.count; i++)
        if (sim->locals.items[i] == b)
            return sim->local_data.items[i];
    cr_assert_fail("LOCAL array '%s' used before its alloc", b->name);
    return NULL;
}

/* x[e] = +-(flat(e) + 1): distinct integers, some negative for absmax. */
static double sim_x_value(int64_t flat)
{
    return (flat % 3 == 1 ? -1.0 : 1.0) * (double)(flat + 1);
}

static void sim_eval(Sim *sim, const Expr *e, const bool *active, double *out);

static void sim_eval_indices(Sim *sim, Expr *const *indices, int rank,
                             const bool *active,
                             double values[][SIM_MAX_THREADS])
{
    for (int d = 0; d < rank; d++)
        sim_eval(sim, indices[d], active, values[d]);
}

static void sim_eval(Sim *sim, const Expr *e, const bool *active, double *out)
{
    int T = sim->threads;
    double a[SIM_MAX_THREADS], b[SIM_MAX_THREADS], c[SIM_MAX_THREADS];
    switch (e->kind) {
    case EXPR_INT:
        for (int t = 0; t < T; t++)
            out[t] = (double)e->u.int_value;
        return;
    case EXPR_FLOAT:
        for (int t = 0; t < T; t++)
            out[t] = e->u.float_value;
        return;
    case EXPR_VAR:
        cr_assert(e->u.var->id < sim->nvars, "unknown var %s", e->u.var->name);
        for (int t = 0; t < T; t++)
            out[t] = sim->env[e->u.var->id * T + t];
        return;
    case EXPR_CAST:
        sim_eval(sim, e->u.cast.value, active, out);
        if (ir_dtype_is_int(e->dtype))
            for (int t = 0; t < T; t++)
                out[t] = trunc(out[t]);
        return;
    case EXPR_UNARY:
        sim_eval(sim, e->u.unary.operand, active, out);
        for (int t = 0; t < T; t++)
            out[t] = e->u.unary.op == UN_ABS ? fabs(out[t])
                     : e->u.unary.op == UN_NEG ? -out[t]
                     : e->u.unary.op == UN_LNOT ? !out[t] : NAN;
        return;
    case EXPR_SELECT:
        sim_eval(sim, e->u.select.cond, active, a);
        sim_eval(sim, e->u.select.then_value, active, b);
        sim_eval(sim, e->u.select.else_value, active, c);
        for (int t = 0; t < T; t++)
            out[t] = a[t] ? b[t] : c[t];
        return;
    case EXPR_CALL:
        if (e->u.call.op == INTR_THREAD_IDX) {
            for (int t = 0; t < T; t++)
                out[t] = t;
            return;
        }
        cr_assert(e->u.call.op == INTR_SHFL_XOR, "unexpected call %s",
                  ir_intrinsic_name(e->u.call.op));
        sim_eval(sim, e->u.call.args[0], active, a);
        sim_eval(sim, e->u.call.args[1], active, b);
        for (int t = 0; t < T; t++) {
            if (!active[t])
                continue;
            int partner = t ^ (int)b[t];
            /* a shuffle reads a lane of the same warp that runs it too */
            cr_assert(partner / IR_WARP_SIZE == t / IR_WARP_SIZE &&
                      active[partner], "shfl_xor from an inactive lane");
            out[t] = a[partner];
        }
        return;
    case EXPR_LOAD: {
        const Buffer *buf = e->u.load.buffer;
        bool on[SIM_MAX_THREADS];
        memcpy(on, active, sizeof on);
        if (e->u.load.predicate) {
            sim_eval(sim, e->u.load.predicate, active, a);
            for (int t = 0; t < T; t++)
                on[t] = on[t] && a[t];
        }
        double idx[IR_MAX_RANK][SIM_MAX_THREADS];
        sim_eval_indices(sim, e->u.load.indices, buf->rank, on, idx);
        const double *rows[IR_MAX_RANK];
        for (int d = 0; d < buf->rank; d++)
            rows[d] = idx[d];
        for (int t = 0; t < T; t++) {
            out[t] = 0.0;
            if (!on[t])
                continue;
            if (buf->scope == SCOPE_LOCAL) {
                out[t] = sim_local(sim, buf)[(int64_t)idx[0][t] * T + t];
                continue;
            }
            cr_assert(strcmp(buf->name, "x") == 0, "load of '%s'", buf->name);
            int64_t flat = sim_flat(sim, buf->rank, rows, t);
            cr_assert(flat >= 0, "unmasked load outside the tile");
            cr_assert(sim->owner[flat] < 0, "element %lld of x loaded twice",
                      (long long)flat);
            sim->owner[flat] = t;
            out[t] = sim_x_value(flat);
        }
        return;
    }
    case EXPR_BINARY:
        sim_eval(sim, e->u.binary.lhs, active, a);
        sim_eval(sim, e->u.binary.rhs, active, b);
        for (int t = 0; t < T; t++) {
            double x = a[t], y = b[t];
            bool is_int = ir_dtype_is_int(e->u.binary.lhs->dtype);
            switch (e->u.binary.op) {
            case BIN_ADD: out[t] = x + y; break;
            case BIN_SUB: out[t] = x - y; break;
            case BIN_MUL: out[t] = x * y; break;
            case BIN_DIV: out[t] = is_int ? floor(x / y) : x / y; break;
            case BIN_MOD: out[t] = x - floor(x / y) * y; break;
            case BIN_MIN: out[t] = fmin(x, y); break;
            case BIN_MAX: out[t] = fmax(x, y); break;
            case BIN_LT: out[t] = x < y; break;
            case BIN_LE: out[t] = x <= y; break;
            case BIN_GT: out[t] = x > y; break;
            case BIN_GE: out[t] = x >= y; break;
            case BIN_EQ: out[t] = x == y; break;
            case BIN_NE: out[t] = x != y; break;
            case BIN_LAND: out[t] = x && y; break;
            case BIN_LOR: out[t] = x || y; break;
            default:
                cr_assert_fail("unexpected %s",
                               ir_binop_name(e->u.binary.op));
            }
        }
        return;
    default:
        cr_assert_fail("unexpected %s expression", ir_expr_name(e->kind));
    }
}

static void sim_store(Sim *sim, const Stmt *s, const bool *active)
{
    int T = sim->threads;
    const Buffer *buf = s->u.store.buffer;
    bool on[SIM_MAX_THREADS];
    memcpy(on, active, sizeof on);
    double p[SIM_MAX_THREADS], value[SIM_MAX_THREADS];
    if (s->u.store.predicate) {
        sim_eval(sim, s->u.store.predicate, active, p);
        for (int t = 0; t < T; t++)
            on[t] = on[t] && p[t];
    }
    double idx[IR_MAX_RANK][SIM_MAX_THREADS];
    sim_eval_indices(sim, s->u.store.indices, buf->rank, on, idx);
    sim_eval(sim, s->u.store.value, on, value);
    const double *rows[IR_MAX_RANK];
    for (int d = 0; d < buf->rank; d++)
        rows[d] = idx[d];
    for (int t = 0; t < T; t++) {
        if (!on[t])
            continue;
        if (buf->scope == SCOPE_LOCAL) {
            int64_t i = (int64_t)idx[0][t];
            cr_assert(i >= 0 && i < buf->shape[0]->u.int_value,
                      "'%s'[%lld] outside the LOCAL array", buf->name,
                      (long long)i);
            sim_local(sim, buf)[i * T + t] = value[t];
            continue;
        }
        bool is_y = strcmp(buf->name, "y") == 0;
        int64_t flat = sim_flat(sim, buf->rank, rows, t);
        cr_assert(flat >= 0, "unmasked store outside the tile");
        (is_y ? sim->y : sim->z)[flat] = value[t];
        (is_y ? sim->y_writes : sim->z_writes)[flat]++;
    }
}

static void sim_stmt(Sim *sim, const Stmt *s, const bool *active)
{
    int T = sim->threads;
    double v[SIM_MAX_THREADS];
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            sim_stmt(sim, s->u.seq.items[i], active);
        return;
    case STMT_LET:
    case STMT_ASSIGN: {
        bool let = s->kind == STMT_LET;
        const Var *var = let ? s->u.let.var : s->u.assign.var;
        const Expr *value = let ? s->u.let.value : s->u.assign.value;
        if (!value)
            return;
        sim_eval(sim, value, active, v);
        for (int t = 0; t < T; t++)
            if (active[t])
                sim->env[var->id * T + t] = v[t];
        return;
    }
    case STMT_STORE:
        sim_store(sim, s, active);
        return;
    case STMT_ALLOC: {
        Buffer *b = s->u.alloc.buffer;
        cr_assert(b->scope == SCOPE_LOCAL, "'%s' is still a %s buffer", b->name,
                  ir_scope_name(b->scope));
        /* codegen zero-fills LOCAL arrays; so does the interpreter */
        double *data = calloc((size_t)(b->shape[0]->u.int_value * T),
                              sizeof *data);
        vec_push(sim->k->arena, &sim->locals, b);
        vec_push(sim->k->arena, &sim->local_data, data);
        return;
    }
    case STMT_FOR: {
        /* the tile passes only make loops with constant bounds */
        const Expr *begin = s->u.loop.begin, *end = s->u.loop.end;
        cr_assert(begin->kind == EXPR_INT && end->kind == EXPR_INT);
        for (int64_t i = begin->u.int_value; i < end->u.int_value;
             i += s->u.loop.step) {
            for (int t = 0; t < T; t++)
                sim->env[s->u.loop.var->id * T + t] = (double)i;
            sim_stmt(sim, s->u.loop.body, active);
        }
        return;
    }
    case STMT_IF: {
        bool then_on[SIM_MAX_THREADS], else_on[SIM_MAX_THREADS];
        sim_eval(sim, s->u.if_.cond, active, v);
        for (int t = 0; t < T; t++) {
            then_on[t] = active[t] && v[t];
            else_on[t] = active[t] && !v[t];
        }
        sim_stmt(sim, s->u.if_.then_body, then_on);
        if (s->u.if_.else_body)
            sim_stmt(sim, s->u.if_.else_body, else_on);
        return;
    }
    default:
        cr_assert_fail("unexpected %s statement at thread level",
                       ir_stmt_name(s->kind));
    }
}

/* One configuration: tile shape, threads, input dtype (sets vec), and the
 * reduction. */
static void run_lowered(const int64_t *extent, int rank, int threads,
                        const char *dtype, const char *op, int want_vec)
{
    /* the kernel, in the textual IR */
    char shape[128] = "", row_shape[128] = "";
    char dims[128] = "", row_dims[128] = "";
    char strides[160] = "", row_strides[160] = "";
    char vars_a[128] = "", vars_b[128] = "", vars_b_row[128] = "";
    char vars_c[128] = "";
    char decl_a[160] = "", decl_b[160] = "", decl_c[160] = "";
    for (int d = 0; d < rank; d++) {
        const char *sep = d ? ", " : "";
        char piece[48];
        snprintf(piece, sizeof piece, "%s%lld", sep, (long long)extent[d]);
        strcat(shape, piece);
        strcat(dims, d ? ", %N" : "%N");
        /* dense row-major: stride d = %N ^ (rank - 1 - d) */
        strcat(strides, sep);
        for (int j = d + 1; j < rank; j++)
            strcat(strides, j > d + 1 ? " * %N" : "%N");
        if (d == rank - 1)
            strcat(strides, "1");
        snprintf(piece, sizeof piece, "%s%%a%d", sep, d);
        strcat(vars_a, piece);
        snprintf(piece, sizeof piece, "%s%%a%d: %lld", sep, d,
                 (long long)extent[d]);
        strcat(decl_a, piece);
        snprintf(piece, sizeof piece, "%s%%b%d", sep, d);
        strcat(vars_b, piece);
        snprintf(piece, sizeof piece, "%s%%b%d: %lld", sep, d,
                 (long long)extent[d]);
        strcat(decl_b, piece);
        if (d == rank - 1)
            continue;
        snprintf(piece, sizeof piece, "%s%lld", sep, (long long)extent[d]);
        strcat(row_shape, piece);
        strcat(row_dims, d ? ", %N" : "%N");
        strcat(row_strides, sep);
        for (int j = d + 1; j < rank - 1; j++)
            strcat(row_strides, j > d + 1 ? " * %N" : "%N");
        if (d == rank - 2)
            strcat(row_strides, "1");
        snprintf(piece, sizeof piece, "%s%%b%d", sep, d);
        strcat(vars_b_row, piece);
        snprintf(piece, sizeof piece, "%s%%c%d", sep, d);
        strcat(vars_c, piece);
        snprintf(piece, sizeof piece, "%s%%c%d: %lld", sep, d,
                 (long long)extent[d]);
        strcat(decl_c, piece);
    }
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    fprintf(f,
            "arch sm_90a\n\nkernel lowered {\n  threads %d\n  symbol %%N\n"
            "  param @x: global %s [%s] strides [%s] readonly\n"
            "  param @y: global f32 [%s] strides [%s]\n"
            "  param @z: global f32 [%s] strides [%s]\n"
            "  grid 1, 1, 1\n  body {\n"
            "    alloc @f: fragment f32 [%s]\n"
            "    parallel (%s) {\n      store @f[%s] = f32(@x[%s])\n    }\n"
            "    alloc @r: fragment f32 [%s]\n"
            "    reduce %s @f -> @r dim %d clear\n"
            "    parallel (%s) {\n      store @y[%s] = @f[%s] + @r[%s]\n    }\n"
            "    parallel (%s) {\n      store @z[%s] = @r[%s]\n    }\n"
            "  }\n}\n",
            threads, dtype, dims, strides, dims, strides, row_dims,
            row_strides, shape, decl_a, vars_a, vars_a,
            row_shape, op, rank - 1, decl_b, vars_b, vars_b, vars_b_row,
            decl_c, vars_c, vars_c);
    fclose(f);
    Diag diag;
    diag_init(&diag, stderr);
    Arena *arena = arena_new();
    Module *m = ir_parse(arena, &diag, "lowered.ir", text);
    cr_assert(m, "the generated kernel does not parse:\n%s", text);
    Kernel *k = m->kernels[0];
    cr_assert(pass_lower_tile_ops(k, &diag) && pass_infer_layouts(k, &diag) &&
              pass_lower_parallel(k, &diag), "lowering failed:\n%s", text);
    cr_assert(ir_verify(k, &diag, "lower_parallel"));

    int64_t total = 1;
    for (int d = 0; d < rank; d++)
        total *= extent[d];
    int64_t rows = total / extent[rank - 1];

    Sim sim = {.extent = extent, .rank = rank, .threads = threads, .k = k,
               .nvars = k->nvars};
    sim.env = calloc((size_t)k->nvars * threads, sizeof *sim.env);
    for (int i = 0; i < k->nsymbols; i++)   /* %N: larger than any index */
        for (int t = 0; t < threads; t++)
            sim.env[k->symbols[i]->id * threads + t] = 1 << 20;
    sim.y = calloc((size_t)total, sizeof(double));
    sim.z = calloc((size_t)rows, sizeof(double));
    sim.y_writes = calloc((size_t)total, sizeof(int));
    sim.z_writes = calloc((size_t)rows, sizeof(int));
    sim.owner = malloc((size_t)total * sizeof(int));
    for (int64_t i = 0; i < total; i++)
        sim.owner[i] = -1;
    bool all[SIM_MAX_THREADS];
    for (int t = 0; t < SIM_MAX_THREADS; t++)
        all[t] = t < threads;
    sim_stmt(&sim, k->body, all);

    bool is_sum = strcmp(op, "sum") == 0;
    for (int64_t row = 0; row < rows; row++) {
        double want = is_sum ? 0.0 : -INFINITY;
        for (int64_t j = 0; j < extent[rank - 1]; j++) {
            double x = sim_x_value(row * extent[rank - 1] + j);
            want = is_sum ? want + x
                   : strcmp(op, "absmax") == 0 ? fmax(want, fabs(x))
                   : fmax(want, x);
        }
        cr_assert_eq(sim.z_writes[row], 1, "row %lld stored %d times",
                     (long long)row,
                     sim.z_writes[row]);
        cr_assert(sim.z[row] == want, "row %lld: %s is %g, want %g",
                  (long long)row,
                  op, sim.z[row], want);
        for (int64_t j = 0; j < extent[rank - 1]; j++) {
            int64_t e = row * extent[rank - 1] + j;
            cr_assert_eq(sim.y_writes[e], 1, "y element %lld stored %d times",
                         (long long)e, sim.y_writes[e]);
            /* every replica of the row's result is right */
            cr_assert(sim.y[e] == sim_x_value(e) + want, "y element %lld",
                      (long long)e);
            /* chunk e / vec belongs to thread (e / vec) % threads */
            cr_assert_eq(sim.owner[e], (int)((e / want_vec) % threads),
                         "element %lld loaded by thread %d", (long long)e,
                         sim.owner[e]);
        }
    }
    for (int i = 0; i < sim.local_data.count; i++)
        free(sim.local_data.items[i]);
    free(sim.env);
    free(sim.y);
    free(sim.z);
    free(sim.y_writes);
    free(sim.z_writes);
    free(sim.owner);
    free(text);
    arena_free(arena);
}

Test(lowered, per_token_cast_bf16)   /* f32 y store caps vec at 4: group 8 */
{
    int64_t e[] = {4, 16, 32};
    run_lowered(e, 3, 128, "bf16", "absmax", 4);
}

Test(lowered, f32_group_32)          /* vec 4, group 32, four slots */
{
    int64_t e[] = {4, 4, 128};
    run_lowered(e, 3, 128, "f32", "absmax", 4);
}

Test(lowered, partial_chunks_max)    /* 48 chunks over 128 threads */
{
    int64_t e[] = {3, 64};
    run_lowered(e, 2, 128, "f32", "max", 4);
}

Test(lowered, odd_extents_sum)       /* 60 chunks of 4 (f32 store), group 4 */
{
    int64_t e[] = {5, 3, 16};
    run_lowered(e, 3, 64, "e4m3", "sum", 4);
}

Test(lowered, rank4_partial_slot)    /* 192 chunks of 4: 3 slots of 64 */
{
    int64_t e[] = {2, 3, 2, 64};
    run_lowered(e, 4, 64, "bf16", "sum", 4);
}

Test(lowered, vec_limited_by_extent) /* e4m3 allows 16, the f32 store 4 */
{
    int64_t e[] = {7, 24, 8};
    run_lowered(e, 3, 96, "e4m3", "max", 4);
}

/* ===================================================================== */
/* lower_tma --explain-tma                                                */
/* ===================================================================== */

/* Runs lower_tma with pass_explain_tma over the input part of a golden and
 * returns the notes (malloc'd). */
static char *explain_tma(const char *case_file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/lower_tma/%s", GOLDEN_DIR, case_file);
    char *text = read_file(path);
    cr_assert(text, "cannot read %s", path);
    char *after;
    char *marker = find_marker(text, EXPECTED_MARKER, &after);
    if (marker)
        *marker = 0;
    char *notes = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&notes, &size);
    Diag diag;
    diag_init(&diag, out);
    diag_add_source(&diag, case_file, text);
    Arena *arena = arena_new();
    Module *m = ir_parse(arena, &diag, case_file, text);
    cr_assert(m, "%s does not parse", case_file);
    pass_explain_tma = true;
    for (int i = 0; i < m->nkernels; i++)
        cr_assert(pass_lower_tma(m->kernels[i], &diag));
    pass_explain_tma = false;
    fclose(out);
    arena_free(arena);
    free(text);
    return notes;
}

/* Every copy gets exactly one note, in program order, with its reason. */
Test(explain_tma, reasons)
{
    char *notes = explain_tma("fallback.ir");
    static const char *const want[] = {
        "fallback.ir:21:5: note: copy 'x' -> 't' is not a TMA copy: in auto "
        "mode only copies in a pipelined loop or into a gemm operand use TMA",
        "fallback.ir:23:7: note: copy 'z' -> 't' is not a TMA copy: stride 0 "
        "of 'z' (%s) is not provably a multiple of 16 bytes",
        "fallback.ir:24:7: note: copy 'x' -> 'big' is not a TMA copy: box "
        "extent 512 of dimension 0 is over 256",
        "fallback.ir:25:7: note: copy 'x' -> 'ga' is not a TMA copy: 'ga' is "
        "a gemm operand, so its rows must be exactly 128 bytes for the "
        "128-byte swizzle; they are 256",
        "fallback.ir:26:7: note: copy 'w' -> 'gb' is not a TMA copy: the copy "
        "converts f32 to bf16",
        "fallback.ir:27:7: note: copy 'x' -> 't' is not a TMA copy: the "
        "copy's tma hint is off",
    };
    const char *at = notes;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(at, want[i]);
        cr_assert(hit, "missing (in order) note:\n%s\nin:\n%s", want[i], notes);
        at = hit + strlen(want[i]);
    }
    int count = 0;
    for (const char *p = strstr(notes, ": note: "); p; p = strstr(p + 1, ": note: "))
        count++;
    cr_assert_eq(count, 6, "%d notes for 6 copies:\n%s", count, notes);
    free(notes);
}

Test(explain_tma, tma_copies)
{
    char *notes = explain_tma("gemm.ir");
    cr_assert(strstr(notes, "gemm.ir:22:7: note: copy 'a' -> 'sa' is a TMA load: "
                            "tensor map 0, box [128, 64], 128-byte swizzle, "
                            "pipelined"), "%s", notes);
    cr_assert(strstr(notes, "copy 'b' -> 'sb' is a TMA load: tensor map 1, "
                            "box [256, 64], 128-byte swizzle, pipelined"), "%s", notes);
    cr_assert(strstr(notes, "copy 'acc' -> 'd' is not a TMA copy: it is not "
                            "between global and shared memory"), "%s", notes);
    free(notes);
    notes = explain_tma("gemm_tma_off.ir");
    cr_assert(strstr(notes, "is not a TMA copy: the kernel's tma hint is off"),
              "%s", notes);
    free(notes);
}
