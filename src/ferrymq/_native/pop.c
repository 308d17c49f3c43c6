/* Stamping popped records with their receipt handle, in C: the per-message loop of
 * protocol/pop.py's py_stamp_batch (the reference, same contract and same bytes).
 *
 * Each stored record (RocketMQ's layout, see protocol/message.py) is copied with POP_CK =
 * prefix + its queue offset appended to its properties, its total size and properties length
 * updated, and optionally its topic replaced and its reconsume times set. Two passes: the first
 * checks every record and sums the output size, the second writes one bytes object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAGIC_V1 0xDAA320A7u
#define MIN_RECORD 64
#define MAX_PROPS 32767
#define KEY "POP_CK\x01"
#define KEY_LEN 7

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline unsigned char *put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
    return p + 4;
}

typedef struct {
    Py_ssize_t reconsume_at, topic_at, props_len_at, size;
    int v1;
} Layout;

/* Locate the parts of the record at `r` (`avail` bytes left in its run); NULL or a problem. */
static const char *layout(const unsigned char *r, Py_ssize_t avail, Layout *l) {
    if (avail < MIN_RECORD) return "a stored record is at least 64 bytes";
    l->size = (int32_t)be32(r);
    if (l->size < MIN_RECORD || l->size > avail) return "record size does not fit its buffer";
    uint32_t flag = be32(r + 36);
    l->reconsume_at = 48 + ((flag & 0x10) ? 20 : 8) + 8 + ((flag & 0x20) ? 20 : 8);
    if (l->reconsume_at + 19 > l->size) return "record too short for its header";
    int32_t body_len = (int32_t)be32(r + l->reconsume_at + 12);
    l->topic_at = l->reconsume_at + 16 + (Py_ssize_t)body_len;
    if (body_len < 0 || l->topic_at + 3 > l->size) return "not a whole stored record";
    l->v1 = be32(r + 4) == MAGIC_V1;
    l->props_len_at = l->v1 ? l->topic_at + 1 + r[l->topic_at]
                            : l->topic_at + 2 + (((Py_ssize_t)r[l->topic_at] << 8) | r[l->topic_at + 1]);
    if (l->props_len_at + 2 > l->size) return "record properties do not end the record";
    return NULL;
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

PyDoc_STRVAR(stamp_batch_doc,
"stamp_batch(buffers, prefix, topic, has_times, times) -> (bytes, [queue offsets relative to the first],\n"
"\"o1,o2,...\" (the queue offsets in decimal)); ValueError on a bad record.");

static PyObject *stamp_batch(PyObject *self, PyObject *args) {
    PyObject *buffers, *topic_obj;
    Py_buffer prefix;
    int has_times, times;
    if (!PyArg_ParseTuple(args, "Oy*Opi", &buffers, &prefix, &topic_obj, &has_times, &times)) return NULL;
    const char *topic = NULL;
    Py_ssize_t topic_len = 0;
    PyObject *seq = NULL, *out = NULL, *offsets = NULL, *csv = NULL, *result = NULL;
    char *csv_buf = NULL;
    Py_ssize_t csv_len = 0;
    int64_t first = 0;
    Py_buffer *views = NULL;
    Py_ssize_t n = 0, held = 0;
    if (topic_obj != Py_None) {
        if (!PyBytes_Check(topic_obj)) {
            PyErr_SetString(PyExc_TypeError, "topic must be bytes or None");
            goto done;
        }
        topic = PyBytes_AS_STRING(topic_obj);
        topic_len = PyBytes_GET_SIZE(topic_obj);
    }
    seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (seq == NULL) goto done;
    n = PySequence_Fast_GET_SIZE(seq);
    views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    offsets = PyList_New(0);
    if (offsets == NULL) goto done;
    Py_ssize_t total = 0;
    char digits[24];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &views[i], PyBUF_SIMPLE) < 0) goto done;
        held = i + 1;
        const unsigned char *b = views[i].buf;
        Py_ssize_t pos = 0, end = views[i].len;
        while (pos < end) {
            Layout l;
            const char *problem = layout(b + pos, end - pos, &l);
            if (problem) {
                PyErr_SetString(PyExc_ValueError, problem);
                goto done;
            }
            const unsigned char *r = b + pos;
            int64_t offset = be64(r + 20);
            if (PyList_GET_SIZE(offsets) == 0) first = offset;
            PyObject *o = PyLong_FromLongLong(offset - first);
            if (o == NULL || PyList_Append(offsets, o) < 0) {
                Py_XDECREF(o);
                goto done;
            }
            Py_DECREF(o);
            Py_ssize_t props = l.size - (l.props_len_at + 2);
            int sep = props > 0 && r[l.size - 1] != 2;
            Py_ssize_t added = sep + KEY_LEN + prefix.len + snprintf(digits, sizeof digits, "%lld", (long long)offset) + 1;
            if (props + added > MAX_PROPS) {
                PyErr_SetString(PyExc_ValueError, "properties too long to add a receipt handle");
                goto done;
            }
            Py_ssize_t block = l.props_len_at - l.topic_at;
            if (topic != NULL) {
                if (l.v1 ? topic_len >= 128 : topic_len >= 65536) {
                    PyErr_SetString(PyExc_ValueError, "topic name does not fit the record's format");
                    goto done;
                }
                block = (l.v1 ? 1 : 2) + topic_len;
            }
            total += l.topic_at + block + 2 + props + added;
            pos += l.size;
        }
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    csv_buf = PyMem_Malloc(PyList_GET_SIZE(offsets) * 21 + 1);
    if (csv_buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *b = views[i].buf;
        Py_ssize_t pos = 0, end = views[i].len;
        while (pos < end) {
            Layout l;
            layout(b + pos, end - pos, &l);  /* checked in the first pass */
            const unsigned char *r = b + pos;
            int64_t offset = be64(r + 20);
            Py_ssize_t props = l.size - (l.props_len_at + 2);
            int sep = props > 0 && r[l.size - 1] != 2;
            int nd = snprintf(digits, sizeof digits, "%lld", (long long)offset);
            if (csv_len) csv_buf[csv_len++] = ',';
            memcpy(csv_buf + csv_len, digits, nd);
            csv_len += nd;
            Py_ssize_t added = sep + KEY_LEN + prefix.len + nd + 1;
            Py_ssize_t block = topic != NULL ? (l.v1 ? 1 : 2) + topic_len : l.props_len_at - l.topic_at;
            Py_ssize_t new_size = l.topic_at + block + 2 + props + added;
            unsigned char *start = w;
            w = put32(w, (uint32_t)new_size);
            memcpy(w, r + 4, l.topic_at - 4);
            if (has_times) put32(start + l.reconsume_at, (uint32_t)times);
            w = start + l.topic_at;
            if (topic != NULL) {
                if (l.v1) {
                    *w++ = (unsigned char)topic_len;
                } else {
                    *w++ = (unsigned char)(topic_len >> 8);
                    *w++ = (unsigned char)topic_len;
                }
                memcpy(w, topic, topic_len);
                w += topic_len;
            } else {
                memcpy(w, r + l.topic_at, block);
                w += block;
            }
            Py_ssize_t new_props = props + added;
            *w++ = (unsigned char)(new_props >> 8);
            *w++ = (unsigned char)new_props;
            memcpy(w, r + l.props_len_at + 2, props);
            w += props;
            if (sep) *w++ = 2;
            memcpy(w, KEY, KEY_LEN);
            w += KEY_LEN;
            memcpy(w, prefix.buf, prefix.len);
            w += prefix.len;
            memcpy(w, digits, nd);
            w += nd;
            *w++ = 2;
            pos += l.size;
        }
    }
    csv = PyUnicode_DecodeASCII(csv_buf, csv_len, NULL);
    if (csv == NULL) goto done;
    result = PyTuple_Pack(3, out, offsets, csv);
done:
    PyMem_Free(csv_buf);
    Py_XDECREF(csv);
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_XDECREF(seq);
    Py_XDECREF(out);
    Py_XDECREF(offsets);
    PyBuffer_Release(&prefix);
    return result;
}

static PyMethodDef methods[] = {
    {"stamp_batch", stamp_batch, METH_VARARGS, stamp_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "pop", NULL, -1, methods};

PyMODINIT_FUNC PyInit_pop(void) { return PyModule_Create(&module); }
