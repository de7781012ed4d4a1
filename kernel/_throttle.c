/* A libgit2 diff progress callback that asks Python whether to stop at most once per interval
 * (SPEC K-6).
 *
 * kernel/gitdiff.py runs git_diff_tree_to_workdir without the GIL and stops it between work-tree
 * items when the call's deadline passes or it is cancelled. A Python progress callback took the
 * GIL once per item: beside a busy Python thread every item queued for it (100,000 files: 19 s
 * instead of 3.2 s). This callback runs per item without the GIL, reads CLOCK_MONOTONIC and calls
 * the payload's ``ask`` (a cffi Python callback: it takes the GIL and runs ``should_stop``) only
 * when ``next_ns`` has been reached; the first item asks at once (``next_ns`` starts at 0).
 *
 *   PROGRESS      the callback's address, as an int, for libgit2's git_diff_options.progress_cb:
 *                 int (*)(const git_diff *, const char *old_path, const char *new_path, void *payload)
 *   PAYLOAD_SIZE  sizeof(struct throttle): gitdiff.py checks its cffi declaration against it.
 *
 * The payload is declared identically in gitdiff.py's cdef. The next ask is timed from when the
 * previous answer came back, so however long ``ask`` waits for the GIL, at most one ask per
 * ``interval_ns`` of libgit2's own work is made. A nonzero answer is returned to libgit2, which
 * ends its walk and returns it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

struct throttle {
    int (*ask)(void);
    int64_t interval_ns;
    int64_t next_ns;
};

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return INT64_MAX; /* cannot tell the time: ask every item, as without this module */
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

static int progress(const void *diff, const char *old_path, const char *new_path, void *payload)
{
    struct throttle *t = (struct throttle *)payload;
    int answer;
    (void)diff;
    (void)old_path;
    (void)new_path;
    if (t == NULL || t->ask == NULL)
        return 0;
    if (monotonic_ns() < t->next_ns)
        return 0;
    answer = t->ask();
    t->next_ns = monotonic_ns();
    if (t->interval_ns > 0 && t->next_ns <= INT64_MAX - t->interval_ns)
        t->next_ns += t->interval_ns;
    return answer;
}

static struct PyModuleDef throttle_module = {
    PyModuleDef_HEAD_INIT,
    "kernel._throttle",
    "A libgit2 diff progress callback asking Python at most once per interval (see _throttle.c).",
    -1,
    NULL,
};

PyMODINIT_FUNC PyInit__throttle(void)
{
    int (*callback)(const void *, const char *, const char *, void *) = progress;
    PyObject *module = PyModule_Create(&throttle_module);
    PyObject *address;
    int failed;
    if (module == NULL)
        return NULL;
    /* A function pointer as an integer: POSIX requires function and object pointers to convert. */
    address = PyLong_FromSize_t((size_t)(uintptr_t)callback);
    failed = PyModule_AddObjectRef(module, "PROGRESS", address) < 0; /* NULL address: fails */
    Py_XDECREF(address);
    if (failed || PyModule_AddIntConstant(module, "PAYLOAD_SIZE", (long)sizeof(struct throttle)) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
