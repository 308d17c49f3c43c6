/* ferrymq._native.rows: stored message records (a PULL_MESSAGE answer) scanned into Arrow column buffers.

   Mirrors ferrymq.spark.rows.records_to_batch (the pure-Python reference): the record layout is
   RocketMQ's stored MessageExt (TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
   SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPAREDTXOFFSET,
   BODYLEN, BODY, TOPICLEN, TOPIC, PROPLEN, PROPERTIES; big-endian), properties are
   key \x01 value \x02 pairs. `scan(answers)` does the per-record loop in C and hands back plain byte
   buffers (int32 offsets, native-endian values, an LSB validity bitmap for tags) that Python wraps
   with pyarrow's from_buffers, so no Python object is made per row.

   It covers the common case only and returns None for everything else, which the Python path then
   decodes (or rejects with MessageDecodeError): malformed or truncated records, compressed bodies,
   non-ASCII topics or properties (the Python path decodes UTF-8 and splits keys on Unicode
   whitespace), and repeated property keys (a dict keeps the last value). Every read is bounds-checked
   against the buffer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define COMPRESSED_FLAG 0x1
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define NCOLS 24

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int put(Buf *b, const void *src, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int put_i32(Buf *b, int32_t v) { return put(b, &v, 4); }
static int put_i64(Buf *b, int64_t v) { return put(b, &v, 8); }

/* A variable-width column: int32 offsets (starting at 0) and the bytes. */
typedef struct {
    Buf offsets, data;
} Var;

static int var_put(Var *v, const void *src, Py_ssize_t n) {
    if (put(&v->data, src, n) < 0) return -1;
    if (v->data.len > INT32_MAX) return -2;
    return put_i32(&v->offsets, (int32_t)v->data.len);
}

static int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint32_t)be32(p + 4));
}

static int64_t millis_to_us(int64_t ms) { return (int64_t)((uint64_t)ms * 1000u); } /* wraps, as Arrow's multiply */

static int ascii(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] >= 0x80) return 0;
    return 1;
}

static int is_space(unsigned char c) { /* str.split()'s whitespace within ASCII */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

typedef struct {
    const unsigned char *key, *value;
    Py_ssize_t key_len, value_len;
} Pair;

#define MAX_PAIRS 64

/* The well-formed pairs of a properties block, as decode_properties keeps them. Returns the count,
   or -1 when the Python path must decide (too many pairs, or a key repeated). */
static int split_props(const unsigned char *p, Py_ssize_t n, Pair *pairs) {
    int count = 0;
    Py_ssize_t start = 0;
    while (start <= n) {
        const unsigned char *piece = p + start;
        const unsigned char *stop = memchr(piece, 0x02, n - start);
        Py_ssize_t len = stop ? stop - piece : n - start;
        const unsigned char *sep = memchr(piece, 0x01, len);
        if (sep && sep > piece) {
            Py_ssize_t key_len = sep - piece;
            for (int i = 0; i < count; i++)
                if (pairs[i].key_len == key_len && memcmp(pairs[i].key, piece, key_len) == 0) return -1;
            if (count == MAX_PAIRS) return -1;
            pairs[count++] = (Pair){piece, sep + 1, key_len, len - key_len - 1};
        }
        start += len + 1;
    }
    return count;
}

static const Pair *find(const Pair *pairs, int count, const char *key) {
    Py_ssize_t n = (Py_ssize_t)strlen(key);
    for (int i = 0; i < count; i++)
        if (pairs[i].key_len == n && memcmp(pairs[i].key, key, n) == 0) return &pairs[i];
    return NULL;
}

enum { QID, QOFF, CLOFF, BORN, STORE, RECONSUME, NFIXED };
enum { TOPIC, MSGID, TAGS, BODY, KEYS, NAMES, VALUES, NVAR };

typedef struct {
    Buf fixed[NFIXED];
    Var var[NVAR];
    Buf tags_valid, key_lists, maps;
    Py_ssize_t rows;
} Columns;

/* 0: one record appended; 1: hand the answer to the Python path; -1: out of memory. */
static int record(Columns *c, const unsigned char *r, Py_ssize_t size) {
    if (size < 40) return 1;
    int32_t sys_flag = be32(r + 36);
    Py_ssize_t born_len = sys_flag & BORNHOST_V6_FLAG ? 20 : 8;
    Py_ssize_t store_len = sys_flag & STOREHOST_V6_FLAG ? 20 : 8;
    Py_ssize_t store_ts = 48 + born_len, store_host = store_ts + 8, after = store_host + store_len;
    Py_ssize_t body_start = after + 16;
    if (body_start > size) return 1;
    int32_t magic = be32(r + 4), body_len = be32(r + after + 12);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || body_len < 0 || (sys_flag & COMPRESSED_FLAG)) return 1;
    Py_ssize_t p = body_start + body_len, topic_len;
    if (magic == MAGIC_V1) {
        if (p + 1 > size) return 1;
        topic_len = r[p++];
    } else {
        if (p + 2 > size) return 1;
        topic_len = (Py_ssize_t)r[p] << 8 | r[p + 1];
        p += 2;
    }
    Py_ssize_t props_start = p + topic_len + 2;
    if (props_start > size) return 1;
    const unsigned char *topic = r + p, *props = r + props_start;
    Py_ssize_t props_len = size - props_start;
    if (!ascii(topic, topic_len) || !ascii(props, props_len)) return 1;
    Pair pairs[MAX_PAIRS];
    int count = split_props(props, props_len, pairs);
    if (count < 0) return 1;

    int rc = put_i32(&c->fixed[QID], be32(r + 12)) | put_i64(&c->fixed[QOFF], be64(r + 20)) |
             put_i64(&c->fixed[CLOFF], be64(r + 28)) | put_i64(&c->fixed[BORN], millis_to_us(be64(r + 40))) |
             put_i64(&c->fixed[STORE], millis_to_us(be64(r + store_ts))) |
             put_i32(&c->fixed[RECONSUME], be32(r + after));
    rc |= var_put(&c->var[TOPIC], topic, topic_len) | var_put(&c->var[BODY], r + body_start, body_len);

    const Pair *uniq = find(pairs, count, "UNIQ_KEY");
    if (uniq && uniq->value_len) {
        rc |= var_put(&c->var[MSGID], uniq->value, uniq->value_len);
    } else { /* the offset id: store host and CommitLog offset as uppercase hex */
        static const char hex[] = "0123456789ABCDEF";
        char id[56];
        Py_ssize_t n = 0;
        for (Py_ssize_t i = 0; i < store_len; i++) id[n++] = hex[r[store_host + i] >> 4], id[n++] = hex[r[store_host + i] & 15];
        for (Py_ssize_t i = 28; i < 36; i++) id[n++] = hex[r[i] >> 4], id[n++] = hex[r[i] & 15];
        rc |= var_put(&c->var[MSGID], id, n);
    }

    const Pair *tags = find(pairs, count, "TAGS");
    if ((c->rows & 7) == 0) rc |= put(&c->tags_valid, "", 1);
    if (tags) c->tags_valid.p[c->rows >> 3] |= (char)(1 << (c->rows & 7));
    rc |= var_put(&c->var[TAGS], tags ? tags->value : r, tags ? tags->value_len : 0);

    const Pair *keys = find(pairs, count, "KEYS");
    for (Py_ssize_t i = 0, n = keys ? keys->value_len : 0; i < n;) {
        while (i < n && is_space(keys->value[i])) i++;
        Py_ssize_t start = i;
        while (i < n && !is_space(keys->value[i])) i++;
        if (i > start) rc |= var_put(&c->var[KEYS], keys->value + start, i - start);
    }
    rc |= put_i32(&c->key_lists, (int32_t)(c->var[KEYS].offsets.len / 4 - 1));

    for (int i = 0; i < count; i++)
        rc |= var_put(&c->var[NAMES], pairs[i].key, pairs[i].key_len) |
              var_put(&c->var[VALUES], pairs[i].value, pairs[i].value_len);
    rc |= put_i32(&c->maps, (int32_t)(c->var[NAMES].offsets.len / 4 - 1));
    c->rows++;
    if (rc == 0) return 0;
    return rc & 1 ? -1 : 1; /* -2 alone: a column past 2 GiB, left to the Python path */
}

/* The records of one pull answer, which must end on a record boundary. */
static int scan_buffer(Columns *c, const unsigned char *buf, Py_ssize_t end) {
    Py_ssize_t pos = 0;
    while (pos < end) {
        if (end - pos < 4) return 1;
        int32_t size = be32(buf + pos);
        if (size <= 0 || size > end - pos) return 1;
        int rc = record(c, buf + pos, size);
        if (rc) return rc;
        pos += size;
    }
    return 0;
}

static PyObject *as_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len); }

static PyObject *scan(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "scan() takes a list of buffers");
    if (!seq) return NULL;
    Columns c;
    memset(&c, 0, sizeof c);
    int rc = 0;
    for (int i = 0; i < NVAR; i++) rc |= put_i32(&c.var[i].offsets, 0);
    rc |= put_i32(&c.key_lists, 0) | put_i32(&c.maps, 0);
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE) < 0) {
            rc = -2; /* not a buffer: its TypeError is raised */
            break;
        }
        rc = scan_buffer(&c, view.buf, view.len);
        PyBuffer_Release(&view);
    }
    Py_DECREF(seq);
    PyObject *out = NULL;
    if (rc == -2) {
        /* the TypeError of a non-buffer stands */
    } else if (rc < 0) {
        PyErr_NoMemory();
    } else if (rc > 0) {
        out = Py_NewRef(Py_None);
    } else {
        Buf *bufs[NCOLS] = {&c.fixed[QID], &c.fixed[QOFF], &c.fixed[CLOFF], &c.fixed[BORN], &c.fixed[STORE],
                            &c.fixed[RECONSUME], &c.var[TOPIC].offsets, &c.var[TOPIC].data,
                            &c.var[MSGID].offsets, &c.var[MSGID].data, &c.var[TAGS].offsets,
                            &c.var[TAGS].data, &c.tags_valid, &c.var[BODY].offsets, &c.var[BODY].data,
                            &c.key_lists, &c.var[KEYS].offsets, &c.var[KEYS].data, &c.maps,
                            &c.var[NAMES].offsets, &c.var[NAMES].data, &c.var[VALUES].offsets,
                            &c.var[VALUES].data, NULL};
        out = PyTuple_New(NCOLS);
        if (out) {
            PyTuple_SET_ITEM(out, 0, PyLong_FromSsize_t(c.rows));
            for (int i = 0; i < NCOLS - 1; i++) PyTuple_SET_ITEM(out, i + 1, as_bytes(bufs[i]));
            for (int i = 0; i < NCOLS; i++)
                if (!PyTuple_GET_ITEM(out, i)) {
                    Py_CLEAR(out);
                    break;
                }
        }
    }
    for (int i = 0; i < NFIXED; i++) PyMem_Free(c.fixed[i].p);
    for (int i = 0; i < NVAR; i++) PyMem_Free(c.var[i].offsets.p), PyMem_Free(c.var[i].data.p);
    PyMem_Free(c.tags_valid.p), PyMem_Free(c.key_lists.p), PyMem_Free(c.maps.p);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(records) -> (rows, column buffers...) for records_to_batch, or None for the Python path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ferrymq._native.rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit_rows(void) { return PyModule_Create(&module); }
