"""cffi (API mode) build script for ``slotworker._slots_cffi``.

setup.py imports this to generate the C source of the module, then compiles
it with ext/slotcore.c as an ordinary setuptools Extension (so its own
build_ext can catch a failed build).  Run it directly to build in place, for
a quick check without setup.py::

    python ext/slots_cffi_build.py     # writes _slots_cffi.*.so into the cwd
"""

from __future__ import annotations

import os

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE_NAME = "slotworker._slots_cffi"
# Relative to the project root, as setup.py wants them.
SOURCES = ["ext/slotcore.c"]
INCLUDE_DIRS = ["ext"]

# What Python may call.  slot_counter is left opaque ("...;"): cffi learns
# its size from the compiler, and Python never touches the atomic word.
CDEF = """
typedef struct { ...; } slot_counter;
#define SLOT_MAX ...
int slot_init(slot_counter *c, uint64_t capacity);
uint32_t slot_try_acquire(slot_counter *c, uint64_t n);
int slot_release(slot_counter *c, uint64_t n, uint32_t *in_use_seen);
int slot_resize(slot_counter *c, uint64_t capacity);
void slot_snapshot(const slot_counter *c, uint32_t *capacity, uint32_t *in_use);
uint32_t slot_capacity(const slot_counter *c);
uint32_t slot_in_use(const slot_counter *c);
uint32_t slot_free(const slot_counter *c);
"""

ffi = cffi.FFI()
ffi.cdef(CDEF)
# cffi wraps every call in Py_BEGIN/END_ALLOW_THREADS.  These functions
# take nanoseconds, never block and never touch Python objects, so dropping
# the GIL only adds its own cost (and, with threads, a contended re-take on
# every call: measured several times slower).  Defining the two macros away
# for the generated wrappers keeps the GIL held; on PyPy the wrappers are not
# used (the JIT calls the C functions directly), so this is CPython only.
# Should cffi stop using these macros, this merely stops having an effect.
PREAMBLE = '''
#include "slotcore.h"
#ifndef PYPY_VERSION
#  undef Py_BEGIN_ALLOW_THREADS
#  undef Py_END_ALLOW_THREADS
#  define Py_BEGIN_ALLOW_THREADS {
#  define Py_END_ALLOW_THREADS }
#endif
'''

ffi.set_source(
    MODULE_NAME,
    PREAMBLE,
    sources=[os.path.join(HERE, "slotcore.c")],
    include_dirs=[HERE],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
