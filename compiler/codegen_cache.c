/*
 * codegen_cache.c -- global loads and stores under a cache hint: the
 * tensor's own (`x: tensor<...>[...] cache(C)`, Buffer.cache_hint) or else
 * the kernel's (launch ... with(load_cache = C, store_cache = C),
 * Kernel.load_cache / store_cache); docs/language.md.
 *
 * LLVM 22's NVPTX back end has no way to put a cache operator or an L2
 * policy on an ordinary load or store (it ignores !nontemporal), so a
 * hinted access to a global tensor is inline PTX:
 *   streaming    st.global.cs / ld.global.cs[.nc]: evict-first in L1 and
 *                L2 (SASS STG.E.EF / LDG.E.EF)
 *   evict_first  st/ld.global[.nc].L2::cache_hint with the policy of
 *   evict_last   createpolicy.fractional.L2::<priority>.b64 p, 1.0
 *                (computed once per kernel in the entry block; ptxas puts
 *                it in the access's uniform memory descriptor)
 * Loads of read-only tensors keep .nc (the LDG.CONSTANT path LLVM picks
 * for them otherwise).  The value travels as 32-bit words (.v4.b32 for 16
 * bytes, .v2.b32 for 8, .b32), or one 16-bit register for .b16 and .b8;
 * an access wider than 16 bytes or less aligned than its size is split
 * into pieces of its alignment (at most 16 bytes), as the back end splits
 * plain accesses.  The asm statements clobber "memory", so LLVM keeps
 * them in program order with every other memory access; ptxas schedules
 * them as the loads and stores they are.
 */
#include <stdio.h>
#include <string.h>

#include "codegen_llvm.h"

/* Bits of a memory type: an integer, a float, or a vector of them. */
static unsigned type_bits(LLVMTypeRef type) {
    switch (LLVMGetTypeKind(type)) {
    case LLVMIntegerTypeKind: return LLVMGetIntTypeWidth(type);
    case LLVMHalfTypeKind:
    case LLVMBFloatTypeKind: return 16;
    case LLVMFloatTypeKind: return 32;
    case LLVMDoubleTypeKind: return 64;
    case LLVMVectorTypeKind:
        return LLVMGetVectorSize(type) * type_bits(LLVMGetElementType(type));
    default: ice("cache-hinted access of an unexpected LLVM type");
    }
}

/* The L2 policy register of a hint (evict_first, evict_last), created
 * once per kernel at the end of the entry block: it has no operands, so
 * it dominates every use. */
static LLVMValueRef cache_policy(Codegen *cg, CacheHint hint) {
    if (cg->cache_policies[hint]) return cg->cache_policies[hint];
    LLVMTypeRef i64 = LLVMInt64TypeInContext(cg->context);
    LLVMTypeRef type = LLVMFunctionType(i64, NULL, 0, 0);
    char text[96];
    snprintf(text, sizeof text, "createpolicy.fractional.L2::%s.b64 $0, 1.0;",
             ir_cache_hint_name(hint));
    LLVMValueRef code = LLVMGetInlineAsm(type, text, strlen(text), "=l", 2, 0, 0,
                                         LLVMInlineAsmDialectATT, 0);
    LLVMBuilderRef at_entry = LLVMCreateBuilderInContext(cg->context);
    LLVMValueRef terminator = LLVMGetBasicBlockTerminator(cg->entry);
    if (terminator) LLVMPositionBuilderBefore(at_entry, terminator);
    else LLVMPositionBuilderAtEnd(at_entry, cg->entry);
    cg->cache_policies[hint] = LLVMBuildCall2(at_entry, type, code, NULL, 0, "policy");
    LLVMDisposeBuilder(at_entry);
    return cg->cache_policies[hint];
}

/* The PTX of one access of `bytes` (1, 2, 4, 8 or 16): its qualifiers,
 * operand list and constraints.  Operands: stores `[$0], value` (words
 * $1...), loads `value, [$words]`; then the policy. */
typedef struct AccessForm {
    int words;            /* 32-bit registers, or 1 for a 16-bit one */
    bool narrow;          /* .b8 / .b16 through a 16-bit register */
    const char *vector;   /* "", ".v2", ".v4" */
    const char *type;     /* ".b8" ... ".b32" */
} AccessForm;

static AccessForm access_form(unsigned bytes) {
    switch (bytes) {
    case 1: return (AccessForm){1, true, "", ".b8"};
    case 2: return (AccessForm){1, true, "", ".b16"};
    case 4: return (AccessForm){1, false, "", ".b32"};
    case 8: return (AccessForm){2, false, ".v2", ".b32"};
    case 16: return (AccessForm){4, false, ".v4", ".b32"};
    default: ice("cache-hinted access of %u bytes", bytes);
    }
}

/* The qualifiers after ld.global / st.global for a hint. */
static const char *hint_qualifier(CacheHint hint) {
    return hint == CACHE_STREAMING ? ".cs" : ".L2::cache_hint";
}

/* Piece size of an access of `bytes` with proven `alignment`: a power
 * of two dividing both, at most 16. */
static unsigned piece_bytes(unsigned bytes, unsigned alignment) {
    unsigned piece = 16;
    while (piece > 1 && (bytes % piece != 0 || alignment % piece != 0)) piece /= 2;
    return piece;
}

/* Byte `offset` past `address` (a global pointer). */
static LLVMValueRef offset_address(Codegen *cg, LLVMValueRef address, unsigned offset) {
    if (offset == 0) return address;
    LLVMValueRef index = LLVMConstInt(LLVMInt64TypeInContext(cg->context), offset, 0);
    return LLVMBuildGEP2(cg->builder, LLVMInt8TypeInContext(cg->context), address, &index, 1,
                         "");
}

/* The type of a piece's elements: i32 words, or the piece's own integer
 * for .b8 / .b16. */
static LLVMTypeRef piece_element(Codegen *cg, unsigned piece) {
    return LLVMIntTypeInContext(cg->context, piece < 4 ? piece * 8 : 32);
}

bool cg_cached_store(Codegen *cg, const Buffer *b, LLVMValueRef value, LLVMValueRef address,
                     unsigned alignment) {
    CacheHint hint = b->has_cache_hint ? b->cache_hint : cg->kernel->store_cache;
    if (b->scope != SCOPE_GLOBAL || hint == CACHE_DEFAULT) return false;
    unsigned bytes = type_bits(LLVMTypeOf(value)) / 8;
    unsigned piece = piece_bytes(bytes, alignment);
    LLVMTypeRef element = piece_element(cg, piece);
    unsigned count = bytes / (piece < 4 ? piece : 4);
    /* the value as `count` elements of `element` */
    LLVMValueRef elements = LLVMBuildBitCast(
        cg->builder, value, count > 1 ? LLVMVectorType(element, count) : element, "");
    AccessForm form = access_form(piece);
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->context);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    bool policy = hint != CACHE_STREAMING;
    for (unsigned first = 0, done = 0; done < bytes; done += piece) {
        LLVMValueRef operands[6];
        LLVMTypeRef types[6];
        int n = 0;
        operands[n] = offset_address(cg, address, done);
        types[n++] = LLVMTypeOf(operands[0]);
        for (int w = 0; w < form.words; w++, first++) {
            LLVMValueRef v = count > 1 ? LLVMBuildExtractElement(cg->builder, elements,
                                                                 LLVMConstInt(i32, first, 0), "")
                                       : elements;
            if (form.narrow && piece == 1) v = LLVMBuildZExt(cg->builder, v, i16, "");
            operands[n] = v;
            types[n++] = LLVMTypeOf(v);
        }
        if (policy) {
            operands[n] = cache_policy(cg, hint);
            types[n] = LLVMTypeOf(operands[n]);
            n++;
        }
        char text[160], constraints[64];
        int at = snprintf(text, sizeof text, "st.global%s%s%s [$0], ", hint_qualifier(hint),
                          form.vector, form.type);
        int cat = snprintf(constraints, sizeof constraints, "l");
        at += snprintf(text + at, sizeof text - (size_t)at, form.words > 1 ? "{" : "");
        for (int w = 0; w < form.words; w++) {
            at += snprintf(text + at, sizeof text - (size_t)at, "%s$%d", w ? ", " : "", w + 1);
            cat += snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",%s",
                            form.narrow ? "h" : "r");
        }
        at += snprintf(text + at, sizeof text - (size_t)at, form.words > 1 ? "}" : "");
        if (policy) {
            at += snprintf(text + at, sizeof text - (size_t)at, ", $%d", form.words + 1);
            cat += snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",l");
        }
        snprintf(text + at, sizeof text - (size_t)at, ";");
        snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",~{memory}");
        LLVMTypeRef type = LLVMFunctionType(LLVMVoidTypeInContext(cg->context), types,
                                            (unsigned)n, 0);
        LLVMValueRef code = LLVMGetInlineAsm(type, text, strlen(text), constraints,
                                             strlen(constraints), 1, 0,
                                             LLVMInlineAsmDialectATT, 0);
        LLVMBuildCall2(cg->builder, type, code, operands, (unsigned)n, "");
    }
    return true;
}

LLVMValueRef cg_cached_load(Codegen *cg, const Buffer *b, LLVMTypeRef type,
                            LLVMValueRef address, unsigned alignment) {
    CacheHint hint = b->has_cache_hint ? b->cache_hint : cg->kernel->load_cache;
    if (b->scope != SCOPE_GLOBAL || hint == CACHE_DEFAULT) return NULL;
    unsigned bytes = type_bits(type) / 8;
    unsigned piece = piece_bytes(bytes, alignment);
    LLVMTypeRef element = piece_element(cg, piece);
    unsigned count = bytes / (piece < 4 ? piece : 4);
    AccessForm form = access_form(piece);
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->context);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    LLVMTypeRef word = form.narrow ? i16 : i32;
    bool policy = hint != CACHE_STREAMING;
    LLVMValueRef elements = count > 1 ? LLVMGetPoison(LLVMVectorType(element, count)) : NULL;
    for (unsigned first = 0, done = 0; done < bytes; done += piece) {
        /* outputs $0.. the words, then the address and the policy */
        LLVMTypeRef results[4];
        for (int w = 0; w < form.words; w++) results[w] = word;
        LLVMTypeRef result = form.words > 1
                                 ? LLVMStructTypeInContext(cg->context, results,
                                                           (unsigned)form.words, 0)
                                 : word;
        LLVMValueRef operands[2];
        LLVMTypeRef types[2];
        int n = 0;
        operands[n] = offset_address(cg, address, done);
        types[n++] = LLVMTypeOf(operands[0]);
        if (policy) {
            operands[n] = cache_policy(cg, hint);
            types[n] = LLVMTypeOf(operands[n]);
            n++;
        }
        char text[160], constraints[64];
        /* ld.global{.cop}.nc{.L2::cache_hint}: .cs goes before .nc */
        int at = snprintf(text, sizeof text, "ld.global%s%s%s%s%s ",
                          policy ? "" : hint_qualifier(hint), b->read_only ? ".nc" : "",
                          policy ? hint_qualifier(hint) : "", form.vector, form.type);
        int cat = 0;
        at += snprintf(text + at, sizeof text - (size_t)at, form.words > 1 ? "{" : "");
        for (int w = 0; w < form.words; w++) {
            at += snprintf(text + at, sizeof text - (size_t)at, "%s$%d", w ? ", " : "", w);
            cat += snprintf(constraints + cat, sizeof constraints - (size_t)cat, "%s=%s",
                            w ? "," : "", form.narrow ? "h" : "r");
        }
        at += snprintf(text + at, sizeof text - (size_t)at, "%s, [$%d]",
                       form.words > 1 ? "}" : "", form.words);
        cat += snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",l");
        if (policy) {
            at += snprintf(text + at, sizeof text - (size_t)at, ", $%d", form.words + 1);
            cat += snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",l");
        }
        snprintf(text + at, sizeof text - (size_t)at, ";");
        snprintf(constraints + cat, sizeof constraints - (size_t)cat, ",~{memory}");
        LLVMTypeRef fn = LLVMFunctionType(result, types, (unsigned)n, 0);
        LLVMValueRef code = LLVMGetInlineAsm(fn, text, strlen(text), constraints,
                                             strlen(constraints), 1, 0,
                                             LLVMInlineAsmDialectATT, 0);
        LLVMValueRef loaded = LLVMBuildCall2(cg->builder, fn, code, operands, (unsigned)n, "");
        for (int w = 0; w < form.words; w++, first++) {
            LLVMValueRef v = form.words > 1
                                 ? LLVMBuildExtractValue(cg->builder, loaded, (unsigned)w, "")
                                 : loaded;
            if (form.narrow && piece == 1) v = LLVMBuildTrunc(cg->builder, v, element, "");
            elements = count > 1 ? LLVMBuildInsertElement(cg->builder, elements, v,
                                                          LLVMConstInt(i32, first, 0), "")
                                 : v;
        }
    }
    return LLVMBuildBitCast(cg->builder, elements, type, "");
}
