# Turn a file into a C array: cmake -DINPUT=f -DSYMBOL=s -DOUTPUT=o.c -P embed.cmake
# Defines `const unsigned char SYMBOL[]` (NUL-terminated) and `const unsigned SYMBOL_len`.
file(READ ${INPUT} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
file(WRITE ${OUTPUT} "/* generated from ${INPUT}; do not edit */\nconst unsigned char ${SYMBOL}[] = {\n${bytes}0x00};\nconst unsigned ${SYMBOL}_len = ${len};\n")
