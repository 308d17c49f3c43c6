/* SEND_BATCH_MESSAGE bodies into CommitLog records, in C: the per-message loops of
 * protocol/batch.py's scan_batch and write_batch_records (the references, same contracts).
 *
 * A batch body is, per message: TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODYLEN (int32 each), the
 * body, PROPLEN (int16), the properties. Each becomes a stored record (RocketMQ's layout, see
 * protocol/record.py) written straight into the CommitLog mapping, and its 20-byte ConsumeQueue
 * entry (CommitLog offset, size, tag hash) is built on the way. Body CRCs are computed by the
 * crc32 callable the caller passes (isal's, which beats any table-driven loop here).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BATCH_HEAD 20
#define BATCH_OVERHEAD 22
#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define MAX_TOPIC_V1_SIZE 127
#define CQ_ENTRY_SIZE 20

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static inline unsigned char *put32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
    return p + 4;
}

static inline unsigned char *put64(unsigned char *p, uint64_t v) { return put32(put32(p, v >> 32), (uint32_t)v); }

/* Check the batch entry at `pos`; NULL if sound, else a message (format with pos). */
static const char *check_entry(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, int32_t *size,
                               int32_t *body_len, int16_t *props_len) {
    if (end - pos < BATCH_OVERHEAD) return "truncated batch entry at %zd";
    *size = be32(b + pos);
    *body_len = be32(b + pos + 16);
    Py_ssize_t props_len_pos = pos + BATCH_HEAD + (Py_ssize_t)*body_len;
    if (*body_len < 0 || *size < BATCH_OVERHEAD || pos + *size > end || props_len_pos + 2 > pos + *size)
        return "batch entry at %zd has inconsistent lengths";
    *props_len = be16(b + props_len_pos);
    if (*props_len < 0 || props_len_pos + 2 + *props_len != pos + *size)
        return "batch entry at %zd has inconsistent properties length";
    return NULL;
}

PyDoc_STRVAR(scan_batch_doc,
"scan_batch(data) -> (count, largest body, largest properties), or a str saying what is malformed.");

static PyObject *scan_batch(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t pos = 0, end = view.len, count = 0;
    int32_t largest_body = 0, largest_props = 0, size, body_len;
    int16_t props_len;
    PyObject *result = NULL;
    while (pos < end) {
        const char *problem = check_entry(b, pos, end, &size, &body_len, &props_len);
        if (problem) {
            result = PyUnicode_FromFormat(problem, pos);
            goto done;
        }
        count++;
        if (body_len > largest_body) largest_body = body_len;
        if (props_len > largest_props) largest_props = props_len;
        pos += size;
    }
    result = Py_BuildValue("(nii)", count, largest_body, (int)largest_props);
done:
    PyBuffer_Release(&view);
    return result;
}

/* Java's String.hashCode of the TAGS value in `props`, 0 without one; non-ASCII values go to
 * Python's tag_hash. -1 with an exception on error. */
static int tags_hash(const unsigned char *props, Py_ssize_t n, PyObject *fallback, int64_t *out) {
    *out = 0;
    for (Py_ssize_t i = 0; i + 5 <= n; i++) {
        if ((i == 0 || props[i - 1] == 2) && memcmp(props + i, "TAGS\x01", 5) == 0) {
            const unsigned char *tag = props + i + 5;
            Py_ssize_t len = 0;
            while (i + 5 + len < n && tag[len] != 2) len++;
            uint32_t h = 0;
            for (Py_ssize_t k = 0; k < len; k++) {
                if (tag[k] >= 0x80) {
                    PyObject *v = PyObject_CallFunction(fallback, "y#", (const char *)tag, len);
                    if (v == NULL) return -1;
                    *out = PyLong_AsLongLong(v);
                    Py_DECREF(v);
                    return PyErr_Occurred() ? -1 : 0;
                }
                h = h * 31 + tag[k];
            }
            *out = (int32_t)h;
            return 0;
        }
    }
    return 0;
}

PyDoc_STRVAR(write_batch_records_doc,
"write_batch_records(buf, pos, batch, count, topic_block, queue_id, queue_offset, physical_offset,\n"
"                    sys_flag, born_timestamp, born_host, store_timestamp, store_host, crc32, tag_hash)\n"
"    -> bytearray of ConsumeQueue entries\n\n"
"Write the `count` messages of a batch body (checked by scan_batch) as records into `buf` at `pos`.");

static PyObject *write_batch_records(PyObject *self, PyObject *args) {
    Py_buffer out, batch, topic, born, store;
    Py_ssize_t pos, count;
    int queue_id, sys_flag;
    long long queue_offset, phys, born_ts, store_ts;
    PyObject *crc32, *fallback;
    if (!PyArg_ParseTuple(args, "w*ny*ny*iLLiLy*Ly*OO", &out, &pos, &batch, &count, &topic, &queue_id,
                          &queue_offset, &phys, &sys_flag, &born_ts, &born, &store_ts, &store, &crc32, &fallback))
        return NULL;
    PyObject *entries = NULL;
    const unsigned char *b = batch.buf;
    Py_ssize_t head = 72 + born.len + store.len, grow = head + topic.len - BATCH_HEAD, bpos = 0;
    uint32_t magic = topic.len > MAX_TOPIC_V1_SIZE + 1 ? MAGIC_V2 : MAGIC_V1;
    if ((born.len != 8 && born.len != 20) || (store.len != 8 && store.len != 20) || count < 0 || pos < 0) {
        PyErr_SetString(PyExc_ValueError, "bad host width or count");
        goto fail;
    }
    entries = PyByteArray_FromStringAndSize(NULL, count * CQ_ENTRY_SIZE);
    if (entries == NULL) goto fail;
    unsigned char *e = (unsigned char *)PyByteArray_AS_STRING(entries);
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t size, body_len;
        int16_t props_len;
        const char *problem = check_entry(b, bpos, batch.len, &size, &body_len, &props_len);
        if (problem) {
            PyErr_Format(PyExc_ValueError, problem, bpos);
            goto fail;
        }
        Py_ssize_t record_size = size + grow;
        if (pos + record_size > out.len) {
            PyErr_SetString(PyExc_ValueError, "the records do not fit in the buffer");
            goto fail;
        }
        const unsigned char *body = b + bpos + BATCH_HEAD;
        PyObject *mv = PyMemoryView_FromMemory((char *)body, body_len, PyBUF_READ);
        if (mv == NULL) goto fail;
        PyObject *crc_obj = PyObject_CallOneArg(crc32, mv);
        Py_DECREF(mv);
        if (crc_obj == NULL) goto fail;
        uint32_t crc = (uint32_t)PyLong_AsUnsignedLongMask(crc_obj) & 0x7FFFFFFF;
        Py_DECREF(crc_obj);
        int64_t tag;
        if (tags_hash(body + body_len + 2, props_len, fallback, &tag) < 0) goto fail;
        unsigned char *p = (unsigned char *)out.buf + pos;
        p = put32(p, (uint32_t)record_size);
        p = put32(p, magic);
        p = put32(p, crc);
        p = put32(p, (uint32_t)queue_id);
        p = put32(p, (uint32_t)be32(b + bpos + 12)); /* FLAG */
        p = put64(p, (uint64_t)queue_offset);
        p = put64(p, (uint64_t)phys);
        p = put32(p, (uint32_t)sys_flag);
        p = put64(p, (uint64_t)born_ts);
        memcpy(p, born.buf, born.len);
        p = put64(p + born.len, (uint64_t)store_ts);
        memcpy(p, store.buf, store.len);
        p = put32(p + store.len, 0);   /* RECONSUMETIMES */
        p = put64(p, 0);               /* PREPARED TRANSACTION OFFSET */
        p = put32(p, (uint32_t)body_len);
        memcpy(p, body, body_len);
        p += body_len;
        memcpy(p, topic.buf, topic.len);
        p += topic.len;
        memcpy(p, body + body_len, 2 + (Py_ssize_t)props_len); /* PROPLEN + properties */
        unsigned char *entry = e + i * CQ_ENTRY_SIZE;
        put32(put64(entry, (uint64_t)phys), (uint32_t)record_size);
        put64(entry + 12, (uint64_t)tag);
        phys += record_size;
        queue_offset++;
        pos += record_size;
        bpos += size;
    }
    goto done;
fail:
    Py_CLEAR(entries);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&batch);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&born);
    PyBuffer_Release(&store);
    return entries;
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(entries) -> bytes: (body, encoded properties, flag) triples as a SEND_BATCH_MESSAGE body.");

static PyObject *encode_batch(PyObject *self, PyObject *arg) {
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg), total = 0;
    Py_buffer *views = PyMem_Calloc(n ? 2 * n : 1, sizeof(Py_buffer));
    int *flags = PyMem_Calloc(n ? n : 1, sizeof(int));
    Py_ssize_t got = 0;
    PyObject *out = NULL;
    if (views == NULL || flags == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++, got++) {
        PyObject *entry = PyList_GET_ITEM(arg, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyErr_SetString(PyExc_TypeError, "each entry must be (body, properties, flag)");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(entry, 0), &views[2 * i], PyBUF_SIMPLE) < 0) goto done;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(entry, 1), &views[2 * i + 1], PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&views[2 * i]);
            goto done;
        }
        flags[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(entry, 2));
        if (flags[i] == -1 && PyErr_Occurred()) {
            got++;
            goto done;
        }
        if (views[2 * i].len > INT32_MAX - BATCH_OVERHEAD || views[2 * i + 1].len > INT16_MAX) {
            PyErr_SetString(PyExc_ValueError, "body or properties too long for a batch entry");
            got++;
            goto done;
        }
        total += BATCH_OVERHEAD + views[2 * i].len + views[2 * i + 1].len;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t body = views[2 * i].len, props = views[2 * i + 1].len;
        p = put32(p, (uint32_t)(BATCH_OVERHEAD + body + props));
        p = put32(put32(p, 0), 0); /* MAGICCODE, BODYCRC: the broker fills them */
        p = put32(p, (uint32_t)flags[i]);
        p = put32(p, (uint32_t)body);
        memcpy(p, views[2 * i].buf, body);
        p += body;
        *p++ = (unsigned char)(props >> 8);
        *p++ = (unsigned char)props;
        memcpy(p, views[2 * i + 1].buf, props);
        p += props;
    }
done:
    for (Py_ssize_t i = 0; i < got; i++) {
        PyBuffer_Release(&views[2 * i]);
        PyBuffer_Release(&views[2 * i + 1]);
    }
    PyMem_Free(views);
    PyMem_Free(flags);
    return out;
}

static PyMethodDef batch_methods[] = {
    {"encode_batch", encode_batch, METH_O, encode_batch_doc},
    {"scan_batch", scan_batch, METH_O, scan_batch_doc},
    {"write_batch_records", write_batch_records, METH_VARARGS, write_batch_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef batch_module = {
    PyModuleDef_HEAD_INIT, "batch", "SEND_BATCH_MESSAGE bodies into CommitLog records.", -1, batch_methods,
};

PyMODINIT_FUNC PyInit_batch(void) { return PyModule_Create(&batch_module); }
