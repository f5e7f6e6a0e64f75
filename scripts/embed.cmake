# embed.cmake -- turns the kernel library's cubin into a C source file.
# Usage: cmake -DINPUT=file.cubin -DOUTPUT=file.c -P embed.cmake
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUTPUT}
"/* generated from ${INPUT} by scripts/embed.cmake; do not edit */\n"
"#include <stddef.h>\n"
"__attribute__((aligned(64))) const unsigned char tk__cubin[] = {\n${bytes}\n};\n"
"const size_t tk__cubin_size = ${size};\n")
