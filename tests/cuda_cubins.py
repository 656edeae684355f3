#!/usr/bin/env python3
"""cuda_cubins.py EXE: list the CUDA images in a fusion bundle's .nv_fatbin.

The bundle keeps its kernels as nvcc does: one fat binary (codegen/fatbin.h)
in the executable's .nv_fatbin section.  This reads the section from the
host ELF, walks the fat binary's entries (header: u32 magic 0xBA55ED50, u16
version, u16 header size, u64 size; each entry: u16 kind, 1 PTX or 2 ELF,
u16 version, u32 header size, u64 padded payload size, u32 SM at byte 28),
and prints one line an image:

    cubin sm_NN BYTES bytes N kernels      (its kernels, from .text.<name>, indented)
    ptx sm_NN BYTES bytes

A CUBIN's own ELF header must agree with its entry (e_machine EM_CUDA, its
SM in e_flags).  Exit 1 when there is no .nv_fatbin, it is malformed, or it
holds no CUBIN.  This stands in for `cuobjdump -lelf -lptx`, which this
project's machines do not have (the toolkit here ships no cuobjdump)."""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50


def section(data, wanted):
    """The bytes of the host ELF's section named `wanted`, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    for name, _, _, _, off, size in headers:
        end = data.index(b"\0", strtab + name)
        if data[strtab + name:end].decode() == wanted:
            return data[off:off + size]
    return None


def cubin_kernels(elf):
    """(SM from e_flags, the .text.<kernel> names) of a CUDA ELF image."""
    if elf[:4] != b"\x7fELF" or struct.unpack_from("<H", elf, 18)[0] != 190:
        raise ValueError("an ELF entry that is not a CUDA ELF (e_machine 190)")
    flags = struct.unpack_from("<I", elf, 48)[0]
    sm = (flags >> 8) & 0xFF if elf[8] >= 8 else flags & 0xFF
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]
    names = []
    for name, *_ in headers:
        end = elf.index(b"\0", strtab + name)
        names.append(elf[strtab + name:end].decode())
    return sm, sorted(n[len(".text."):] for n in names if n.startswith(".text."))


def entries(fat):
    """(kind, sm, payload) for every image of every fat binary in `fat`."""
    at = 0
    while at + 16 <= len(fat):
        magic, _, header, size = struct.unpack_from("<IHHQ", fat, at)
        if magic != FATBIN_MAGIC:
            if any(fat[at:]):
                raise ValueError(f"no fat binary magic at byte {at} of .nv_fatbin")
            return                        # alignment padding
        entry, end = at + header, at + header + size
        while entry < end:
            kind, _, eheader, padded = struct.unpack_from("<HHIQ", fat, entry)
            sm = struct.unpack_from("<I", fat, entry + 28)[0]
            payload = fat[entry + eheader:entry + eheader + padded]
            yield kind, sm, payload
            entry += eheader + padded
        at = end


def main():
    data = open(sys.argv[1], "rb").read()
    fat = section(data, ".nv_fatbin")
    if fat is None:
        print("no .nv_fatbin section", file=sys.stderr)
        return 1
    cubins = 0
    for kind, sm, payload in entries(fat):
        if kind == 2:
            elf_sm, kernels = cubin_kernels(payload)
            if elf_sm != sm:
                print(f"entry says sm_{sm}, its ELF says sm_{elf_sm}", file=sys.stderr)
                return 1
            cubins += 1
            print(f"cubin sm_{sm} {len(payload)} bytes {len(kernels)} kernels")
            for k in kernels:
                print(f"  {k}")
        elif kind == 1:
            print(f"ptx sm_{sm} {len(payload)} bytes")
        else:
            print(f"unknown image kind {kind}", file=sys.stderr)
            return 1
    if not cubins:
        print("no CUBIN in .nv_fatbin", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, struct.error, IndexError) as e:
        print(f"malformed: {e}", file=sys.stderr)
        sys.exit(1)
