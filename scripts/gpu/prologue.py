#!/usr/bin/env python3
"""First bytes of library functions the tracer probes, as loaded: whether
the kernel can emulate the instruction a uprobe replaces (push, nop, jmp)
or must single-step it out of line, a second trap per hit.

  python3 scripts/gpu/prologue.py LIB SYMBOL [SYMBOL ...]
"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
for name in sys.argv[2:]:
    try:
        addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        print(f"{name}: not exported")
        continue
    print(f"{name}: {ctypes.string_at(addr, 12).hex(' ')}")
