# cython: language_level=3
"""A pool of freed array memory, used by numpy for the arrays sparsegrad makes.

A Jacobian evaluation allocates and frees hundreds of arrays of hundreds of
kilobytes to tens of megabytes.  With glibc's defaults that memory goes back
to the operating system when freed, and the next evaluation faults every
page in again (microseconds per 4 KiB page on virtual machines: for the
2-d shallow-water benchmark, more time than the arithmetic).  This module is
a numpy memory handler (``PyDataMem_Handler``, NEP 49) that keeps freed blocks
of 64 KiB and more in free lists by size class, up to a bound, and hands them
out again: the pattern of CuPy's memory pool, on the CPU.

Blocks carry a 16-byte header with their size and size class, so a block is always
returned to the list it came from whatever size numpy reports on free, and
data stays 16-byte aligned as with ``malloc``.  Smaller requests go straight
to ``malloc``.  A lock guards the lists (numpy calls the handler with the GIL
held, the lock only makes that assumption unnecessary).

sparsegrad installs the handler only around its own operations
(:func:`sparsegrad._memory.pooled`), so arrays of the user's code keep
numpy's default allocator; arrays made inside sparsegrad and handed to the
user (values, Jacobian data) are ordinary arrays that return their memory to
the pool when freed.
"""
from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport uint64_t

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #include "pythread.h"
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif

    /* the NEP 49 handler layout (numpy/ndarraytypes.h, version 1) */
    typedef struct {
        void *ctx;
        void* (*malloc) (void *ctx, size_t size);
        void* (*calloc) (void *ctx, size_t nelem, size_t elsize);
        void* (*realloc) (void *ctx, void *ptr, size_t new_size);
        void (*free) (void *ctx, void *ptr, size_t size);
    } sg_allocator;
    typedef struct {
        char name[127];
        unsigned char version;
        sg_allocator allocator;
    } sg_handler;

    #define SG_HEADER 16                  /* keeps malloc's 16-byte alignment */
    #define SG_MIN_POOLED (64 * 1024)     /* smaller blocks go to malloc */
    #define SG_CLASSES (64 * 8)           /* 8 classes per power of two */
    #define SG_SMALL (-1)

    typedef struct sg_free_block { struct sg_free_block *next; } sg_free_block;

    static sg_free_block *sg_lists[SG_CLASSES];
    static size_t sg_cached_bytes = 0;
    static size_t sg_limit = (size_t)256 * 1024 * 1024;
    static unsigned long long sg_reused = 0, sg_fresh = 0;
    static PyThread_type_lock sg_lock = NULL;

    static int sg_floor_log2(size_t x) {
        int e = 0;
        while (x >>= 1) e++;
        return e;
    }

    /* class of a request of `size` bytes (>= SG_MIN_POOLED); its capacity */
    static int sg_class_of(size_t size, size_t *capacity) {
        int e = sg_floor_log2(size);
        size_t step = (size_t)1 << (e - 3);
        size_t rounded = (size + step - 1) & ~(step - 1);
        e = sg_floor_log2(rounded);
        *capacity = rounded;
        return e * 8 + (int)((rounded >> (e - 3)) - 8);
    }

    static size_t sg_capacity_of(int cls) {
        int e = cls / 8, sub = cls % 8;
        return ((size_t)(8 + sub)) << (e - 3);
    }

    /* header: the requested size (offset 0) and the size class (offset 8) */
    static void *sg_user(char *block, int cls, size_t size) {
        *(size_t *)block = size;
        *(int *)(block + 8) = cls;
        return block + SG_HEADER;
    }

    #if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
    #define MADV_POPULATE_WRITE 23        /* Linux 5.14; older kernels refuse it */
    #endif

    /* a new block from the C library (zeroed: calloc, whose fresh pages cost
       nothing until touched).  On Linux its pages of a block of 256 KiB and
       more are faulted in by one call (MADV_POPULATE_WRITE) instead of one
       fault per page as the arrays are first written.  No huge-page advice,
       unlike numpy's allocator: pooled blocks are reused, so huge pages would
       only spare first-touch faults, and on the virtual machines measured
       (docs/performance.md) an advised first touch cost up to three times
       more per byte, when the kernel compacts memory for it. */
    static char *sg_new_block(size_t capacity, int zeroed) {
        char *block = (char *)(zeroed ? calloc(1, capacity + SG_HEADER)
                                      : malloc(capacity + SG_HEADER));
    #if defined(__linux__)
        if (block != NULL && capacity >= ((size_t)256 << 10)) {
            size_t page = 4096, start = ((size_t)block + page - 1) & ~(page - 1);
            size_t end = ((size_t)block + capacity + SG_HEADER) & ~(page - 1);
            if (end > start) (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
        }
    #endif
        return block;
    }

    static void *sg_allocate(size_t size, int zeroed) {
        size_t capacity;
        int cls;
        char *block = NULL;
        if (size < SG_MIN_POOLED) {
            block = (char *)(zeroed ? calloc(1, size + SG_HEADER) : malloc(size + SG_HEADER));
            return block ? sg_user(block, SG_SMALL, size) : NULL;
        }
        cls = sg_class_of(size, &capacity);
        PyThread_acquire_lock(sg_lock, WAIT_LOCK);
        if (sg_lists[cls] != NULL) {
            block = (char *)sg_lists[cls];
            sg_lists[cls] = sg_lists[cls]->next;
            sg_cached_bytes -= capacity;
            sg_reused++;
        } else {
            sg_fresh++;
        }
        PyThread_release_lock(sg_lock);
        if (block == NULL) {
            block = sg_new_block(capacity, zeroed);
            if (block == NULL) return NULL;
        } else if (zeroed) {
            memset(block + SG_HEADER, 0, size);
        }
        return sg_user(block, cls, size);
    }

    static void *sg_malloc(void *ctx, size_t size) {
        return sg_allocate(size, 0);
    }

    static void *sg_calloc(void *ctx, size_t nelem, size_t elsize) {
        if (elsize != 0 && nelem > ((size_t)-1 - SG_HEADER) / elsize) return NULL;
        return sg_allocate(nelem * elsize, 1);
    }

    static void sg_free(void *ctx, void *ptr, size_t size) {
        char *block;
        int cls;
        size_t capacity;
        if (ptr == NULL) return;
        block = (char *)ptr - SG_HEADER;
        cls = *(int *)(block + 8);
        if (cls == SG_SMALL) { free(block); return; }
        capacity = sg_capacity_of(cls);
        PyThread_acquire_lock(sg_lock, WAIT_LOCK);
        if (sg_cached_bytes + capacity <= sg_limit) {
            ((sg_free_block *)block)->next = sg_lists[cls];
            sg_lists[cls] = (sg_free_block *)block;
            sg_cached_bytes += capacity;
            block = NULL;
        }
        PyThread_release_lock(sg_lock);
        if (block != NULL) free(block);
    }

    static void *sg_realloc(void *ctx, void *ptr, size_t new_size) {
        char *block;
        int cls;
        size_t old_size;
        void *fresh;
        if (ptr == NULL) return sg_malloc(ctx, new_size);
        block = (char *)ptr - SG_HEADER;
        old_size = *(size_t *)block;
        cls = *(int *)(block + 8);
        if (cls == SG_SMALL && new_size < SG_MIN_POOLED) {
            block = (char *)realloc(block, new_size + SG_HEADER);
            return block ? sg_user(block, SG_SMALL, new_size) : NULL;
        }
        if (cls != SG_SMALL && new_size >= SG_MIN_POOLED && new_size <= sg_capacity_of(cls)) {
            *(size_t *)block = new_size;
            return ptr;
        }
        fresh = sg_malloc(ctx, new_size);
        if (fresh == NULL) return NULL;
        memcpy(fresh, ptr, old_size < new_size ? old_size : new_size);
        sg_free(ctx, ptr, old_size);
        return fresh;
    }

    static void sg_release_all(void) {
        int cls;
        sg_free_block *block, *next;
        PyThread_acquire_lock(sg_lock, WAIT_LOCK);
        for (cls = 0; cls < SG_CLASSES; cls++) {
            block = sg_lists[cls];
            sg_lists[cls] = NULL;
            while (block != NULL) { next = block->next; free(block); block = next; }
        }
        sg_cached_bytes = 0;
        PyThread_release_lock(sg_lock);
    }

    static sg_handler sg_pool_handler = {
        "sparsegrad_pool", 1, {NULL, sg_malloc, sg_calloc, sg_realloc, sg_free}
    };

    static int sg_init_lock(void) {
        if (sg_lock == NULL) sg_lock = PyThread_allocate_lock();
        return sg_lock == NULL ? -1 : 0;
    }
    """
    ctypedef struct sg_handler:
        pass
    sg_handler sg_pool_handler
    size_t sg_cached_bytes
    size_t sg_limit
    unsigned long long sg_reused
    unsigned long long sg_fresh
    int sg_init_lock()
    void sg_release_all()


cdef extern from "numpy/arrayobject.h":
    object PyDataMem_SetHandler(object handler)
    void import_array()

import_array()
if sg_init_lock() != 0:
    raise MemoryError("sparsegrad: cannot allocate the memory pool's lock")

#: the pool's numpy memory handler (a "mem_handler" capsule, NEP 49)
HANDLER = PyCapsule_New(<void*>&sg_pool_handler, "mem_handler", NULL)


cpdef object install():
    """Make the pool numpy's allocator in the current context; returns the previous handler."""
    return PyDataMem_SetHandler(HANDLER)


cpdef object restore(object previous):
    """Give the current context back the handler :func:`install` returned."""
    return PyDataMem_SetHandler(previous)


def set_limit(nbytes):
    """Bound the bytes kept in free lists (blocks freed beyond it go back to ``free``)."""
    global sg_limit
    if nbytes < 0:
        raise ValueError("the pool limit must be >= 0, got %d" % nbytes)
    sg_limit = <size_t>nbytes
    if sg_cached_bytes > sg_limit:
        sg_release_all()


def release_all():
    """Free every cached block."""
    sg_release_all()


def info():
    """``(cached_bytes, limit, reused, fresh)``: bytes held now, the bound, and the
    counts of pooled requests served from a free list or by ``malloc``."""
    return int(sg_cached_bytes), int(sg_limit), int(sg_reused), int(sg_fresh)
