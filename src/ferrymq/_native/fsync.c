/* fdatasync on a thread of its own that never takes the GIL, fed and answered through pipes.
 *
 * A Python thread that syncs must take the GIL back when fdatasync returns; while the event loop
 * runs Python, that waits for the interpreter's switch interval (5 ms), and the loop must then be
 * woken from that thread. A group commit paid both per cycle: 6 ms for a 0.2 ms fdatasync. This
 * thread never touches Python: it reads a job from one pipe, syncs, writes the outcome to another
 * pipe the event loop watches, and waits for the next job (no thread start per sync).
 * store/group_commit.py's start_syncer (a Python thread) is the reference this mirrors.
 *
 *   start_syncer(job_fd: int, signal_fd: int) -> None
 *       start a detached thread that, until job_fd reaches its end, reads jobs from it -- a native
 *       int32 count, then that many int32 file descriptors -- fdatasyncs each fd in turn and writes
 *       4 bytes to signal_fd: 0, or the errno of the first fdatasync that failed (native order).
 *       The thread closes job_fd when it ends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_FDS 64

typedef struct {
    int job_fd, signal_fd;
} Syncer;

/* Read exactly `size` bytes; 0 at the end of the pipe (or on an error), 1 when read. */
static int read_all(int fd, void *buf, size_t size) {
    char *p = buf;
    while (size > 0) {
        ssize_t n = read(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        p += n;
        size -= (size_t)n;
    }
    return 1;
}

static void write_all(int fd, const void *buf, size_t size) {
    const char *p = buf;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; /* the reader is gone: nobody waits for this sync any more */
        p += n;
        size -= (size_t)n;
    }
}

static void *run(void *arg) {
    Syncer syncer = *(Syncer *)arg;
    free(arg);
    int32_t count, fds[MAX_FDS];
    while (read_all(syncer.job_fd, &count, sizeof count)) {
        if (count < 0 || count > MAX_FDS || !read_all(syncer.job_fd, fds, (size_t)count * sizeof *fds)) break;
        int32_t outcome = 0;
        for (int32_t i = 0; i < count; i++) {
            if (fdatasync(fds[i]) != 0 && outcome == 0) outcome = errno;
        }
        write_all(syncer.signal_fd, &outcome, sizeof outcome);
    }
    close(syncer.job_fd);
    return NULL;
}

static PyObject *start_syncer(PyObject *self, PyObject *args) {
    int job_fd, signal_fd;
    if (!PyArg_ParseTuple(args, "ii:start_syncer", &job_fd, &signal_fd)) return NULL;
    Syncer *syncer = malloc(sizeof *syncer);
    if (syncer == NULL) return PyErr_NoMemory();
    syncer->job_fd = job_fd;
    syncer->signal_fd = signal_fd;
    pthread_attr_t attr;
    pthread_t thread;
    int err = pthread_attr_init(&attr);
    if (err == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        err = pthread_create(&thread, &attr, run, syncer);
        pthread_attr_destroy(&attr);
    }
    if (err != 0) {
        free(syncer);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"start_syncer", start_syncer, METH_VARARGS,
     "A thread that fdatasyncs the fds of each job read from job_fd and writes the outcome to signal_fd."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fsync", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fsync(void) { return PyModule_Create(&module); }
