#!/usr/bin/env python3
"""cuda_cubins.py EXE: list the CUDA CUBINs embedded in a fusion bundle.

A CUBIN is an ELF image with e_machine EM_CUDA (190); its target SM is in
e_flags (bits 8-15 in the ABI CUDA 12.8+ writes, bits 0-7 before).  Prints
one line an image: 'cubin sm_NN BYTES bytes N kernels', then its kernel
names (the .text.<name> sections) indented.  This stands in for
`cuobjdump -lelf`, which this project's machines do not have (the toolkit
here ships no cuobjdump, and the bundle embeds the CUBINs as plain data,
not as a .nv_fatbin)."""
import struct
import sys


def images(data):
    at = -1
    while True:
        at = data.find(b"\x7fELF", at + 1)
        if at < 0:
            return
        if data[at + 4] != 2 or struct.unpack_from("<H", data, at + 18)[0] != 190:
            continue                     # not a 64-bit CUDA ELF
        flags = struct.unpack_from("<I", data, at + 48)[0]
        shoff = struct.unpack_from("<Q", data, at + 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, at + 0x3A)
        size = shoff + shentsize * shnum
        elf = data[at:at + size]
        sections = []
        for i in range(shnum):
            name, _, _, _, off, sz = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
            sections.append((name, off, sz))
        stroff = sections[shstrndx][1]
        names = []
        for name, _, _ in sections:
            end = elf.index(b"\0", stroff + name)
            names.append(elf[stroff + name:end].decode())
        kernels = sorted(n[len(".text."):] for n in names if n.startswith(".text."))
        abi = data[at + 8]
        sm = (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF
        yield sm, size, kernels


def main():
    data = open(sys.argv[1], "rb").read()
    found = 0
    for sm, size, kernels in images(data):
        found += 1
        print(f"cubin sm_{sm} {size} bytes {len(kernels)} kernels")
        for k in kernels:
            print(f"  {k}")
    if not found:
        print("no CUBIN found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
