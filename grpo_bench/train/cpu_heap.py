"""Keep the memory a CPU run frees in its heap, so the next forward reuses it instead of faulting in fresh pages.

A CPU training step allocates and frees the same activation buffers (1-20 MB each on the embedded world) every
forward. glibc's malloc returns such buffers to the kernel (``mmap`` for a large block, trimming the heap top for a
freed one) and faults zeroed pages back in on the next allocation: on the world's U-Net about 4,000 page faults
per batch-16 forward, 12% of its compute seconds in the kernel and more in cold caches (measured on an AMD EPYC,
one thread: 65.5 -> 51.0 ms a forward, 250 -> 228 ms a batch-24 forward+backward; a whole 10-update field cell
2.7-6% fewer compute seconds, bitwise the same metrics, checkpoints and eval videos). Two ``mallopt`` settings
keep them:

* ``M_MMAP_THRESHOLD`` 32 MiB (glibc's largest): blocks below it come from the heap, not from ``mmap``;
* ``M_TRIM_THRESHOLD`` 1 GiB: freed heap memory stays in the process up to that much.

Both or neither: a fixed value turns off glibc's dynamic mmap threshold, so the trim threshold alone sends every
large block to ``mmap`` again (4x the faults measured), and the mmap threshold alone still trims (no faster).

Only where the allocator takes memory from changes, never a value (PyTorch aligns every CPU tensor to 64 bytes
wherever its memory comes from); the cost is a resident heap as large as the run's peak of blocks under 32 MiB.
A libc without ``mallopt`` (macOS, musl's no-op) is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: a larger value is refused
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Set the two thresholds in this process; True where glibc took both."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # the mmap threshold first: the trim threshold alone would leave large blocks on a fixed, low mmap threshold
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
