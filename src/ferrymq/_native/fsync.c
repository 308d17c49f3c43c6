/* fdatasync on a thread of its own, which says when it is done by writing to a file descriptor.
 *
 * A Python thread that syncs must take the GIL back when fdatasync returns; while the event loop
 * runs Python, that waits for the interpreter's switch interval (5 ms), and the loop must then be
 * woken from that thread. A group commit paid both per cycle: 6 ms for a 0.2 ms fdatasync. This
 * thread never touches Python: it syncs, writes the outcome to a pipe the event loop watches, and
 * ends. store/flush.py's sync_then_signal (a Python thread) is the reference this mirrors.
 *
 *   sync_then_signal(fds: tuple[int, ...], signal_fd: int) -> None
 *       fdatasync every fd in turn on a new detached thread, then write 4 bytes to signal_fd:
 *       0, or the errno of the first fdatasync that failed (native byte order)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
    int signal_fd;
    Py_ssize_t count;
    int fds[];
} Job;

static void *run(void *arg) {
    Job *job = (Job *)arg;
    int32_t outcome = 0;
    for (Py_ssize_t i = 0; i < job->count; i++) {
        if (fdatasync(job->fds[i]) != 0 && outcome == 0) outcome = errno;
    }
    const char *p = (const char *)&outcome;
    size_t left = sizeof outcome;
    while (left > 0) {
        ssize_t n = write(job->signal_fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            break; /* the reader is gone: nobody waits for this sync any more */
        }
        p += n;
        left -= (size_t)n;
    }
    free(job);
    return NULL;
}

static PyObject *sync_then_signal(PyObject *self, PyObject *args) {
    PyObject *fds;
    int signal_fd;
    if (!PyArg_ParseTuple(args, "O!i:sync_then_signal", &PyTuple_Type, &fds, &signal_fd)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(fds);
    Job *job = malloc(sizeof(Job) + (size_t)count * sizeof(int));
    if (job == NULL) return PyErr_NoMemory();
    job->signal_fd = signal_fd;
    job->count = count;
    for (Py_ssize_t i = 0; i < count; i++) {
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(fds, i));
        if (fd == -1 && PyErr_Occurred()) {
            free(job);
            return NULL;
        }
        if (fd < 0 || fd > INT32_MAX) {
            free(job);
            PyErr_Format(PyExc_ValueError, "not a file descriptor: %ld", fd);
            return NULL;
        }
        job->fds[i] = (int)fd;
    }
    pthread_attr_t attr;
    pthread_t thread;
    int err = pthread_attr_init(&attr);
    if (err == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        err = pthread_create(&thread, &attr, run, job);
        pthread_attr_destroy(&attr);
    }
    if (err != 0) {
        free(job);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"sync_then_signal", sync_then_signal, METH_VARARGS,
     "fdatasync the fds on a thread of its own, then write the outcome (4 bytes) to signal_fd."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fsync", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fsync(void) { return PyModule_Create(&module); }
