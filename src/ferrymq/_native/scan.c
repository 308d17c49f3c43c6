/* CommitLog record scans in C: the per-record loops of the dispatcher and of the indexer.
 *
 * Both walk RocketMQ's stored-message records (layout: protocol/record.py, whose
 * read_record_meta is the reference these mirror check for check) and hand Python one object per
 * run of records instead of one per record:
 *
 *   dispatch_scan: ConsumeQueue entries (CommitLog offset, size, tag hash), grouped into runs of
 *                  one queue with consecutive queue offsets, each run one bytes object;
 *   index_scan:    (key hash, CommitLog offset, store timestamp) for every UNIQ_KEY and KEYS key.
 *
 * Every read is bounds-checked against the caller's limit; a record that is not whole and well
 * formed stops the scan and is reported, never read past.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define BLANK_MAGIC ((int32_t)0xCBD43194)
#define BLANK_MIN_SIZE 8
#define MIN_RECORD_SIZE 91
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define TRANSACTION_TYPE_MASK 0xC
#define TRANSACTION_PREPARED_TYPE 0x4
#define TRANSACTION_ROLLBACK_TYPE 0xC
#define CQ_ENTRY_SIZE 20

/* What dispatch_scan / index_scan report about where they stopped. */
enum { STOP_BOUND = 0, STOP_BLANK = 1, STOP_MALFORMED = 2, STOP_INVALID = 3 };

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4));
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* CRC-32 (zlib's polynomial), for body CRCs and index key hashes. */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    while (n--) crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* One parsed record: the fields the scans need, offsets relative to the buffer. */
typedef struct {
    int32_t size, body_crc, queue_id, sys_flag;
    int64_t queue_offset, physical_offset, store_timestamp;
    Py_ssize_t body_start, body_len, topic_start, topic_len, props_start, props_end;
} Record;

/* Parse the record at `pos`, whose valid bytes end at `limit`: 1 for a record, 0 for the
 * end-of-segment blank, -1 when it is not a whole, well-formed record (read_record_meta's None). */
static int parse_record(const unsigned char *buf, Py_ssize_t pos, Py_ssize_t limit, Record *r) {
    if (limit - pos < 8) return -1;
    const unsigned char *p = buf + pos;
    int32_t size = be32(p), magic = be32(p + 4);
    if (magic == BLANK_MAGIC) return size >= BLANK_MIN_SIZE && size <= limit - pos ? 0 : -1;
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || size < MIN_RECORD_SIZE || size > limit - pos) return -1;
    int32_t sys_flag = be32(p + 36);
    Py_ssize_t born = sys_flag & BORNHOST_V6_FLAG ? 20 : 8, store = sys_flag & STOREHOST_V6_FLAG ? 20 : 8;
    Py_ssize_t fixed = 72 + born + store, end = pos + size, body_start = pos + fixed;
    if (body_start + 3 > end) return -1;
    int32_t body_len = be32(buf + body_start - 4);
    Py_ssize_t q = body_start + body_len;
    if (body_len < 0 || q + 3 > end) return -1;
    Py_ssize_t topic_len;
    if (magic == MAGIC_V1) {
        topic_len = buf[q];
        q += 1;
    } else {
        topic_len = ((Py_ssize_t)buf[q] << 8) | buf[q + 1];
        q += 2;
    }
    Py_ssize_t topic_end = q + topic_len;
    if (topic_end + 2 > end) return -1;
    int16_t props_len = (int16_t)(((uint16_t)buf[topic_end] << 8) | buf[topic_end + 1]);
    if (props_len < 0 || topic_end + 2 + props_len != end) return -1;
    r->size = size;
    r->body_crc = be32(p + 8);
    r->queue_id = be32(p + 12);
    r->queue_offset = be64(p + 20);
    r->physical_offset = be64(p + 28);
    r->sys_flag = sys_flag;
    r->store_timestamp = be64(p + 48 + born);
    r->body_start = body_start;
    r->body_len = body_len;
    r->topic_start = q;
    r->topic_len = topic_len;
    r->props_start = topic_end + 2;
    r->props_end = end;
    return 1;
}

/* find_property: the value of `key` (which ends with \x01) in key\x01value\x02 properties; a match
 * must start the properties or follow a \x02. Returns 0 when absent. */
static int find_property(const unsigned char *props, Py_ssize_t n, const char *key, Py_ssize_t key_len,
                         const unsigned char **value, Py_ssize_t *value_len) {
    for (Py_ssize_t i = 0; i + key_len <= n; i++) {
        if ((i == 0 || props[i - 1] == 2) && memcmp(props + i, key, key_len) == 0) {
            Py_ssize_t start = i + key_len, end = start;
            while (end < n && props[end] != 2) end++;
            *value = props + start;
            *value_len = end - start;
            return 1;
        }
    }
    return 0;
}

/* The topic of the record as str, decoded once per run of records with the same topic bytes.
 * NULL with no exception set: not UTF-8 (the record is malformed). */
typedef struct {
    PyObject *str;
    const unsigned char *raw;
    Py_ssize_t len;
} TopicCache;

static PyObject *topic_of(TopicCache *cache, const unsigned char *raw, Py_ssize_t len) {
    if (cache->str && cache->len == len && memcmp(cache->raw, raw, len) == 0) return cache->str;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)raw, len, "strict");
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_XSETREF(cache->str, s);
    cache->raw = raw;
    cache->len = len;
    return s;
}

/* Java's String.hashCode of a TAGS value; non-ASCII values go to Python's tag_hash. 0 on error. */
static int tag_hash(const unsigned char *tag, Py_ssize_t n, PyObject *fallback, int64_t *out) {
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (tag[i] >= 0x80) {
            PyObject *v = PyObject_CallFunction(fallback, "y#", (const char *)tag, n);
            if (v == NULL) return 0;
            *out = PyLong_AsLongLong(v);
            Py_DECREF(v);
            return !PyErr_Occurred();
        }
        h = h * 31 + tag[i];
    }
    *out = (int32_t)h;
    return 1;
}

/* A run of ConsumeQueue entries being built: one queue, consecutive queue offsets. */
typedef struct {
    PyObject *topic; /* borrowed from the TopicCache while open; owned in the tuple once closed */
    int32_t queue_id;
    int64_t start;
    unsigned char *data;
    Py_ssize_t len, cap;
} Run;

static int run_close(Run *run, PyObject *runs) {
    if (run->len == 0) return 1;
    PyObject *entries = PyBytes_FromStringAndSize((const char *)run->data, run->len);
    if (entries == NULL) return 0;
    PyObject *item = Py_BuildValue("(OiLN)", run->topic, run->queue_id, (long long)run->start, entries);
    if (item == NULL) return 0;
    int failed = PyList_Append(runs, item);
    Py_DECREF(item);
    Py_CLEAR(run->topic);
    run->len = 0;
    return failed == 0;
}

static int run_add(Run *run, PyObject *runs, PyObject *topic, int32_t queue_id, int64_t queue_offset,
                   int64_t phys, int32_t size, int64_t tag) {
    if (run->len && (run->queue_id != queue_id || run->start + run->len / CQ_ENTRY_SIZE != queue_offset ||
                     PyUnicode_Compare(run->topic, topic) != 0)) {
        if (!run_close(run, runs)) return 0;
    }
    if (run->len == 0) {
        Py_INCREF(topic);
        run->topic = topic;
        run->queue_id = queue_id;
        run->start = queue_offset;
    }
    if (run->len + CQ_ENTRY_SIZE > run->cap) {
        Py_ssize_t cap = run->cap ? run->cap * 2 : 64 * CQ_ENTRY_SIZE;
        unsigned char *data = PyMem_Realloc(run->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        run->data = data;
        run->cap = cap;
    }
    unsigned char *e = run->data + run->len;
    put_be64(e, (uint64_t)phys);
    put_be32(e + 8, (uint32_t)size);
    put_be64(e + 12, (uint64_t)tag);
    run->len += CQ_ENTRY_SIZE;
    return 1;
}

PyDoc_STRVAR(dispatch_scan_doc,
"dispatch_scan(buf, pos, end, stop, base, verify_crc, tag_hash) -> (pos, status, count, last_store_timestamp, runs)\n\n"
"Walk records of `buf` (a segment mapped at CommitLog offset `base`) from `pos` while pos < end and\n"
"pos < stop. runs: [(topic, queue_id, first queue offset, ConsumeQueue entries as bytes)], one per\n"
"run of consecutive entries of one queue; half and rolled-back transaction records take none.\n"
"status: 0 stopped at end/stop, 1 the end-of-segment blank is at pos, 2 the bytes at pos are not a\n"
"whole well-formed record, 3 the record at pos has a wrong physical offset or (verify_crc) body CRC.");

static PyObject *dispatch_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, stop;
    long long base;
    int verify_crc;
    PyObject *fallback;
    if (!PyArg_ParseTuple(args, "y*nnnLpO", &view, &pos, &end, &stop, &base, &verify_crc, &fallback)) return NULL;
    PyObject *runs = PyList_New(0), *result = NULL;
    TopicCache topics = {0};
    Run run = {0};
    Py_ssize_t count = 0;
    long long last_ts = 0;
    int status = STOP_BOUND;
    if (runs == NULL) goto done;
    if (pos < 0 || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "scan range outside the buffer");
        goto done;
    }
    const unsigned char *buf = view.buf;
    while (pos < end && pos < stop) {
        Record r;
        int kind = parse_record(buf, pos, end, &r);
        if (kind == 0) { status = STOP_BLANK; break; }
        PyObject *topic = kind > 0 ? topic_of(&topics, buf + r.topic_start, r.topic_len) : NULL;
        if (topic == NULL) {
            if (PyErr_Occurred()) goto done;
            status = STOP_MALFORMED;
            break;
        }
        if (r.physical_offset != base + pos ||
            (verify_crc && (int32_t)(crc32_update(0, buf + r.body_start, r.body_len) & 0x7FFFFFFF) != r.body_crc)) {
            status = STOP_INVALID;
            break;
        }
        int tran = r.sys_flag & TRANSACTION_TYPE_MASK;
        if (tran != TRANSACTION_PREPARED_TYPE && tran != TRANSACTION_ROLLBACK_TYPE) {
            const unsigned char *tag;
            Py_ssize_t tag_len;
            int64_t hash = 0;
            if (find_property(buf + r.props_start, r.props_end - r.props_start, "TAGS\x01", 5, &tag, &tag_len) &&
                tag_len && !tag_hash(tag, tag_len, fallback, &hash))
                goto done;
            if (!run_add(&run, runs, topic, r.queue_id, r.queue_offset, base + pos, r.size, hash)) goto done;
        }
        last_ts = r.store_timestamp;
        pos += r.size;
        count++;
    }
    if (!run_close(&run, runs)) goto done;
    result = Py_BuildValue("(niNLO)", pos, status, PyLong_FromSsize_t(count), last_ts, runs);
done:
    Py_XDECREF(run.topic);
    PyMem_Free(run.data);
    Py_XDECREF(topics.str);
    Py_XDECREF(runs);
    PyBuffer_Release(&view);
    return result;
}

static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Append (crc32(prefix + key) & 0x7FFFFFFF, phys, ts) to items. */
static int add_key(PyObject *items, const unsigned char *prefix, Py_ssize_t prefix_len, const unsigned char *key,
                   Py_ssize_t key_len, long long phys, long long ts) {
    uint32_t crc = crc32_update(crc32_update(0, prefix, prefix_len), (const unsigned char *)"#", 1);
    crc = crc32_update(crc, key, key_len) & 0x7FFFFFFF;
    PyObject *item = Py_BuildValue("(kLL)", (unsigned long)crc, phys, ts);
    if (item == NULL) return 0;
    int failed = PyList_Append(items, item);
    Py_DECREF(item);
    return failed == 0;
}

PyDoc_STRVAR(index_scan_doc,
"index_scan(buf, pos, end, base) -> (pos, status, items)\n\n"
"Walk records of `buf` (a segment mapped at CommitLog offset `base`) from `pos` to `end`; items:\n"
"[(key hash, CommitLog offset, store timestamp)] for the UNIQ_KEY and each whitespace-separated KEYS\n"
"key of every record but rolled-back transactions; key hash = CRC32 of b\"topic#key\" & 0x7FFFFFFF.\n"
"status as dispatch_scan's (0, 1 or 2).");

static PyObject *index_scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    long long base;
    if (!PyArg_ParseTuple(args, "y*nnL", &view, &pos, &end, &base)) return NULL;
    PyObject *items = PyList_New(0), *result = NULL;
    int status = STOP_BOUND;
    if (items == NULL) goto done;
    if (pos < 0 || end > view.len) {
        PyErr_SetString(PyExc_ValueError, "scan range outside the buffer");
        goto done;
    }
    const unsigned char *buf = view.buf;
    while (pos < end) {
        Record r;
        int kind = parse_record(buf, pos, end, &r);
        if (kind <= 0) {
            status = kind == 0 ? STOP_BLANK : STOP_MALFORMED;
            break;
        }
        PyObject *valid = PyUnicode_DecodeUTF8((const char *)buf + r.topic_start, r.topic_len, "strict");
        if (valid == NULL) { /* read_record_meta refuses such a record: stop there too */
            PyErr_Clear();
            status = STOP_MALFORMED;
            break;
        }
        Py_DECREF(valid);
        if ((r.sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE) {
            const unsigned char *props = buf + r.props_start, *topic = buf + r.topic_start, *value;
            Py_ssize_t n = r.props_end - r.props_start, len;
            long long phys = base + pos;
            if (find_property(props, n, "UNIQ_KEY\x01", 9, &value, &len) && len &&
                !add_key(items, topic, r.topic_len, value, len, phys, r.store_timestamp))
                goto done;
            if (find_property(props, n, "KEYS\x01", 5, &value, &len)) {
                for (Py_ssize_t i = 0; i < len;) {
                    while (i < len && is_space(value[i])) i++;
                    Py_ssize_t start = i;
                    while (i < len && !is_space(value[i])) i++;
                    if (i > start && !add_key(items, topic, r.topic_len, value + start, i - start, phys, r.store_timestamp))
                        goto done;
                }
            }
        }
        pos += r.size;
    }
    result = Py_BuildValue("(niO)", pos, status, items);
done:
    Py_XDECREF(items);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(crc32_doc, "crc32(data, value=0) -> int: zlib's CRC-32, for tests against the scans' hashes.");

static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value)) return NULL;
    uint32_t crc = crc32_update(value, view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef scan_methods[] = {
    {"dispatch_scan", dispatch_scan, METH_VARARGS, dispatch_scan_doc},
    {"index_scan", index_scan, METH_VARARGS, index_scan_doc},
    {"crc32", crc32_py, METH_VARARGS, crc32_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "scan", "CommitLog record scans for the dispatcher and the indexer.", -1, scan_methods,
};

PyMODINIT_FUNC PyInit_scan(void) {
    crc_init();
    return PyModule_Create(&scan_module);
}
