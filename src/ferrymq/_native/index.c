/* IndexFile writes in C: the per-key loop of store/index.py's _IndexFile.put (the reference).
 *
 * An index file is RocketMQ's layout: a 40-byte header, a table of int32 hash slots, then 20-byte
 * entries (key hash, CommitLog offset, seconds after the file's first timestamp, previous entry
 * of the slot). Per key the entry is written first, then the header's count, then the slot, so a
 * crash between any two leaves at worst an unreachable entry.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 40
#define SLOT_SIZE 4
#define ENTRY_SIZE 20
#define INDEX_COUNT_POS 36
#define MAX_TIME_DIFF 0x7FFFFFFFLL

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

PyDoc_STRVAR(put_doc,
"put(buf, items, slot_num, entries_pos, count, begin_ts, used_slots, end_ts, end_phys)\n"
"    -> (count, used_slots, end_ts, end_phys)\n\n"
"Write (key hash >= 0, CommitLog offset, store timestamp) items into the mapped index file `buf`,\n"
"which must have room for all of them after `count` entries; return the header's new fields.");

static PyObject *put(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *items;
    long long slot_num, entries_pos, count, begin_ts, used_slots, end_ts, end_phys;
    if (!PyArg_ParseTuple(args, "w*O!LLLLLLL", &view, &PyList_Type, &items, &slot_num, &entries_pos, &count,
                          &begin_ts, &used_slots, &end_ts, &end_phys))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    unsigned char *buf = view.buf;
    if (slot_num <= 0 || entries_pos != HEADER_SIZE + slot_num * SLOT_SIZE || count < 1 ||
        entries_pos + (count + n) * ENTRY_SIZE > view.len) {
        PyErr_SetString(PyExc_ValueError, "index file too small for these entries");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long hash, phys, ts;
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "LLL", &hash, &phys, &ts)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "items must be (hash, offset, timestamp)");
            goto done;
        }
        if (hash < 0 || hash > 0x7FFFFFFFLL) {
            PyErr_SetString(PyExc_ValueError, "key hash must be a non-negative int32");
            goto done;
        }
        long long diff = (ts - begin_ts) / 1000;
        diff = diff < 0 ? 0 : diff > MAX_TIME_DIFF ? MAX_TIME_DIFF : diff;
        unsigned char *slot = buf + HEADER_SIZE + hash % slot_num * SLOT_SIZE;
        long long prev = be32(slot);
        if (!(0 < prev && prev < count)) {
            prev = 0;
            used_slots++;
        }
        unsigned char *e = buf + entries_pos + count * ENTRY_SIZE;
        put_be32(e, (uint32_t)hash);
        put_be32(e + 4, (uint32_t)((uint64_t)phys >> 32));
        put_be32(e + 8, (uint32_t)phys);
        put_be32(e + 12, (uint32_t)diff);
        put_be32(e + 16, (uint32_t)prev);
        count++;
        put_be32(buf + INDEX_COUNT_POS, (uint32_t)count);
        put_be32(slot, (uint32_t)(count - 1));
        if (ts > end_ts) end_ts = ts;
        if (phys > end_phys) end_phys = phys;
    }
    result = Py_BuildValue("(LLLL)", count, used_slots, end_ts, end_phys);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef index_methods[] = {
    {"put", put, METH_VARARGS, put_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef index_module = {
    PyModuleDef_HEAD_INIT, "index", "IndexFile writes for the indexer.", -1, index_methods,
};

PyMODINIT_FUNC PyInit_index(void) { return PyModule_Create(&index_module); }
