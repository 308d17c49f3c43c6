/* The per-send put path in C: a SEND_MESSAGE_V2 header read out of its extFields, and a CommitLog
 * record written into the mapped segment.
 *
 * send_header is a fast path only: it reads the header when every field it needs is in its plain
 * form ("-12", "true") and returns None otherwise, so that SendMessageRequestHeader.from_ext_fields
 * (the reference) takes every other case and names the field at fault. write_record is
 * protocol/record.py's py_write_record (the reference) in one call: same layout, same checks of
 * the host widths, the body's CRC by the CRC function the Python side binds (isal's).
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* memmem */
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define MAX_TOPIC_V1_SIZE 127
#define HEAD_SIZE 48

static PyObject *crc32;        /* isal's crc32(data) -> int */
static PyObject *py_find;      /* the Python find_property, for texts that are not bytes */

/* The extFields keys of SEND_MESSAGE_V2, interned once. */
static PyObject *k_a, *k_b, *k_c, *k_d, *k_e, *k_f, *k_g, *k_h, *k_i, *k_j, *k_k, *k_l, *k_m, *k_bname,
    *k_long_group, *s_true, *s_false;

/* A plain decimal ("0", "-7", "123"; no sign on 0, no leading zero, no spaces) within [lo, hi]:
 * 1 with *out set, 0 if the text is anything else (the reference decides then). */
static int plain_int(PyObject *text, long long lo, long long hi, long long *out) {
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const char *s = (const char *)PyUnicode_DATA(text);
    int negative = n > 0 && s[0] == '-';
    Py_ssize_t i = negative;
    if (n - i < 1 || n - i > 19 || (s[i] == '0' && (n - i > 1 || negative))) return 0;
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (unsigned long long)(s[i] - '0');
    }
    /* 19 digits fit an unsigned 64-bit value; a Long's bounds are checked below */
    if (negative) {
        if (v > (unsigned long long)INT64_MAX + 1) return 0;
        *out = v == (unsigned long long)INT64_MAX + 1 ? INT64_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)INT64_MAX) return 0;
        *out = (long long)v;
    }
    return *out >= lo && *out <= hi;
}

/* A required Int/Long field: 1 and *out, or 0 (missing or not plain). */
static int int_field(PyObject *ext, PyObject *key, long long lo, long long hi, long long *out) {
    PyObject *v = PyDict_GetItemWithError(ext, key);
    return v != NULL && plain_int(v, lo, hi, out);
}

/* A bool field: 1 and *out (default when missing), or 0 (not "true"/"false"). */
static int bool_field(PyObject *ext, PyObject *key, int *out) {
    PyObject *v = PyDict_GetItemWithError(ext, key);
    if (v == NULL) return !PyErr_Occurred();
    if (!PyUnicode_Check(v)) return 0;
    if (PyUnicode_Compare(v, s_true) == 0) *out = 1;
    else if (PyUnicode_Compare(v, s_false) == 0) *out = 0;
    else return 0;
    return 1;
}

#define INT_MIN32 (-2147483648LL)
#define INT_MAX32 2147483647LL

PyDoc_STRVAR(send_header_doc,
"send_header(ext) -> (topic, queue_id, properties, flag, sys_flag, born_timestamp, reconsume_times,\n"
"max_reconsume_times, batch, default_topic, default_topic_queue_nums) or None.\n\n"
"A SEND_MESSAGE_V2 header whose fields are all plain text, as SendMessageRequestHeader.from_ext_fields\n"
"would read it; None for anything else (other key sets, a missing field, a value in another form).");

static PyObject *send_header(PyObject *self, PyObject *ext) {
    if (!PyDict_CheckExact(ext)) Py_RETURN_NONE;
    PyObject *group = PyDict_GetItemWithError(ext, k_a);
    if (group == NULL || !PyUnicode_Check(group)) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    /* the long key set, or a 5.x RPC field beside the letters: the reference sorts those out */
    if (PyDict_GetItemWithError(ext, k_long_group) != NULL || PyDict_GetItemWithError(ext, k_bname) != NULL)
        Py_RETURN_NONE;
    PyObject *topic = PyDict_GetItemWithError(ext, k_b);
    PyObject *default_topic = PyDict_GetItemWithError(ext, k_c);
    PyObject *props = PyDict_GetItemWithError(ext, k_i);
    if (topic == NULL || !PyUnicode_Check(topic) || default_topic == NULL || !PyUnicode_Check(default_topic) ||
        (props != NULL && !PyUnicode_Check(props))) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    long long queue_nums, queue_id, sys_flag, born, flag, reconsume = 0, max_reconsume = 0;
    int unit_mode = 0, batch = 0, has_max = 0;
    if (!int_field(ext, k_d, INT_MIN32, INT_MAX32, &queue_nums) || !int_field(ext, k_e, INT_MIN32, INT_MAX32, &queue_id) ||
        !int_field(ext, k_f, INT_MIN32, INT_MAX32, &sys_flag) || !int_field(ext, k_g, INT64_MIN, INT64_MAX, &born) ||
        !int_field(ext, k_h, INT_MIN32, INT_MAX32, &flag)) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *v = PyDict_GetItemWithError(ext, k_j);
    if (v != NULL && !plain_int(v, INT_MIN32, INT_MAX32, &reconsume)) Py_RETURN_NONE;
    v = v == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(ext, k_l);
    if (v != NULL) {
        if (!plain_int(v, INT_MIN32, INT_MAX32, &max_reconsume)) Py_RETURN_NONE;
        has_max = 1;
    }
    if (PyErr_Occurred() || !bool_field(ext, k_k, &unit_mode) || !bool_field(ext, k_m, &batch)) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *max_obj = has_max ? PyLong_FromLongLong(max_reconsume) : Py_NewRef(Py_None);
    if (max_obj == NULL) return NULL;
    return Py_BuildValue("(OLOLLLLNOOL)", topic, queue_id, props == NULL ? Py_None : props, flag, sys_flag, born,
                         reconsume, max_obj, batch ? Py_True : Py_False, default_topic, queue_nums);
}

static inline void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* An int argument within [lo, hi] (struct's "i"/"q" accept the same ranges), else OverflowError. */
static int ranged(PyObject *o, long long lo, long long hi, const char *name, long long *out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", name);
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (*out == -1 && PyErr_Occurred()) return 0;
    if (overflow || *out < lo || *out > hi) {
        PyErr_Format(PyExc_OverflowError, "%s out of range", name);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(write_record_doc,
"write_record(buf, pos, topic_block, queue_id, flag, queue_offset, physical_offset, sys_flag,\n"
"born_timestamp, born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset,\n"
"body, properties) -> size: protocol/record.py's write_record.");

static PyObject *write_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError, "write_record takes 16 arguments");
        return NULL;
    }
    if (crc32 == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "write_record: bind(crc32) first");
        return NULL;
    }
    static const char *names[] = {"pos", "queue_id", "flag", "queue_offset", "physical_offset", "sys_flag",
                                  "born_timestamp", "store_timestamp", "reconsume_times",
                                  "prepared_transaction_offset"};
    static const int at[] = {1, 3, 4, 5, 6, 7, 8, 10, 12, 13};
    static const int wide[] = {1, 0, 0, 1, 1, 0, 1, 1, 0, 1};
    long long n[10];
    for (int i = 0; i < 10; i++) {
        long long lo = wide[i] ? INT64_MIN : INT_MIN32, hi = wide[i] ? INT64_MAX : INT_MAX32;
        if (!ranged(args[at[i]], lo, hi, names[i], &n[i])) return NULL;
    }
    long long pos = n[0];
    PyObject *block = args[2], *born_host = args[9], *store_host = args[11], *props = args[15];
    if (!PyBytes_Check(block) || !PyBytes_Check(born_host) || !PyBytes_Check(store_host) || !PyBytes_Check(props)) {
        PyErr_SetString(PyExc_TypeError, "topic_block, hosts and properties must be bytes");
        return NULL;
    }
    Py_ssize_t born_len = PyBytes_GET_SIZE(born_host), store_len = PyBytes_GET_SIZE(store_host);
    if ((born_len != 8 && born_len != 20) || (store_len != 8 && store_len != 20)) {
        PyErr_SetString(PyExc_ValueError, "packed hosts are 8 or 20 bytes");
        return NULL;
    }
    Py_ssize_t props_len = PyBytes_GET_SIZE(props), block_len = PyBytes_GET_SIZE(block);
    if (props_len > 0x7FFF) {
        PyErr_SetString(PyExc_OverflowError, "properties longer than a short");
        return NULL;
    }
    PyObject *crc = PyObject_CallOneArg(crc32, args[14]);
    if (crc == NULL) return NULL;
    unsigned long body_crc = PyLong_AsUnsignedLongMask(crc);
    Py_DECREF(crc);
    if (body_crc == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    Py_buffer body, out;
    if (PyObject_GetBuffer(args[14], &body, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&body);
        return NULL;
    }
    Py_ssize_t head = HEAD_SIZE + born_len + 8 + store_len + 4 + 8 + 4;
    Py_ssize_t size = head + body.len + block_len + 2 + props_len;
    PyObject *result = NULL;
    if (pos < 0 || pos > out.len || out.len - pos < size) {
        PyErr_SetString(PyExc_ValueError, "the record does not fit in the buffer");
        goto done;
    }
    if (size > INT_MAX32) {
        PyErr_SetString(PyExc_OverflowError, "record too large");
        goto done;
    }
    unsigned char *p = (unsigned char *)out.buf + pos;
    put32(p, (uint32_t)size);
    put32(p + 4, (uint32_t)(block_len > MAX_TOPIC_V1_SIZE + 1 ? MAGIC_V2 : MAGIC_V1));
    put32(p + 8, (uint32_t)(body_crc & 0x7FFFFFFF));
    put32(p + 12, (uint32_t)n[1]);  /* queue id */
    put32(p + 16, (uint32_t)n[2]);  /* flag */
    put64(p + 20, (uint64_t)n[3]);  /* queue offset */
    put64(p + 28, (uint64_t)n[4]);  /* physical offset */
    put32(p + 36, (uint32_t)n[5]);  /* sys flag */
    put64(p + 40, (uint64_t)n[6]);  /* born timestamp */
    unsigned char *q = p + HEAD_SIZE;
    memcpy(q, PyBytes_AS_STRING(born_host), (size_t)born_len);
    q += born_len;
    put64(q, (uint64_t)n[7]);  /* store timestamp */
    q += 8;
    memcpy(q, PyBytes_AS_STRING(store_host), (size_t)store_len);
    q += store_len;
    put32(q, (uint32_t)n[8]);  /* reconsume times */
    put64(q + 4, (uint64_t)n[9]);  /* prepared transaction offset */
    put32(q + 12, (uint32_t)body.len);
    q += 16;
    memcpy(q, body.buf, (size_t)body.len);
    q += body.len;
    memcpy(q, PyBytes_AS_STRING(block), (size_t)block_len);
    q += block_len;
    q[0] = (unsigned char)(props_len >> 8);
    q[1] = (unsigned char)props_len;
    memcpy(q + 2, PyBytes_AS_STRING(props), (size_t)props_len);
    result = PyLong_FromSsize_t(size);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&body);
    return result;
}

/* The whole key `key` (ending in \x01) in RocketMQ's encoded properties: its value's start and
 * length, or NULL (find_property's rule: the key starts the text or follows a \x02). */
static const char *property_value(const char *props, Py_ssize_t n, const char *key, Py_ssize_t k, Py_ssize_t *len) {
    const char *end = props + n, *at = props;
    for (;;) {
        const char *hit = memmem(at, (size_t)(end - at), key, (size_t)k);
        if (hit == NULL) return NULL;
        if (hit == props || hit[-1] == 2) {
            const char *start = hit + k;
            const char *stop = memchr(start, 2, (size_t)(end - start));
            *len = (stop == NULL ? end : stop) - start;
            return start;
        }
        at = hit + 1;
    }
}

/* Java's String.hashCode of the TAGS value decoded as UTF-8 (errors replaced), 0 without one:
 * the ConsumeQueue tag hash (protocol/hashes.py's tag_hash). -1 with an exception set on failure. */
static int tags_hash(PyObject *props, long long *out) {
    Py_ssize_t len;
    const char *tag = property_value(PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props), "TAGS\x01", 5, &len);
    uint32_t h = 0;
    if (tag != NULL && len > 0) {
        PyObject *text = PyUnicode_DecodeUTF8(tag, len, "replace");
        if (text == NULL) return -1;
        int kind = PyUnicode_KIND(text);
        const void *data = PyUnicode_DATA(text);
        for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(text); i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c < 0x10000) {
                h = h * 31 + c;
            } else { /* a UTF-16 surrogate pair, as Java counts it */
                c -= 0x10000;
                h = h * 31 + (0xD800 + (c >> 10));
                h = h * 31 + (0xDC00 + (c & 0x3FF));
            }
        }
        Py_DECREF(text);
    }
    *out = (int32_t)h;
    return 0;
}

PyDoc_STRVAR(append_doc,
"append(buf, pos, base, topic_block, queue_id, flag, sys_flag, born_timestamp, born_host, now, store_host,\n"
"reconsume_times, prepared_transaction_offset, body, properties, queue_offsets, key, tags_code, prepared,\n"
"prepared_cls, topic) -> queue_offset: store/message_store.py's py_append.");

static PyObject *append_str; /* "append" */

static PyObject *append(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 21) {
        PyErr_SetString(PyExc_TypeError, "append takes 21 arguments");
        return NULL;
    }
    PyObject *queue_offsets = args[15], *key = args[16], *tags_code = args[17], *prepared = args[18];
    PyObject *cls = args[19], *topic = args[20];
    if (!PyDict_CheckExact(queue_offsets) || !PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "append: queue_offsets must be a dict, prepared_cls a tuple class");
        return NULL;
    }
    long long pos, base;
    if (!ranged(args[1], 0, INT64_MAX, "pos", &pos) || !ranged(args[2], INT64_MIN, INT64_MAX, "base", &base))
        return NULL;
    if ((pos > 0 && base > INT64_MAX - pos)) {
        PyErr_SetString(PyExc_OverflowError, "offset out of range");
        return NULL;
    }
    PyObject *queue_offset;
    if (key == Py_None) {
        queue_offset = PyLong_FromLong(0);
    } else {
        queue_offset = PyDict_GetItemWithError(queue_offsets, key);
        if (queue_offset == NULL && PyErr_Occurred()) return NULL;
        queue_offset = queue_offset == NULL ? PyLong_FromLong(0) : Py_NewRef(queue_offset);
    }
    PyObject *phys = PyLong_FromLongLong(base + pos);
    int born_given = PyObject_IsTrue(args[7]); /* `born_timestamp or now` */
    if (born_given < 0) {
        Py_XDECREF(queue_offset);
        Py_XDECREF(phys);
        return NULL;
    }
    PyObject *born = Py_NewRef(born_given ? args[7] : args[9]);
    PyObject *result = NULL, *size = NULL, *end = NULL, *entry = NULL, *record = NULL;
    if (queue_offset == NULL || phys == NULL) goto done;
    PyObject *record_args[16] = {args[0], args[1], args[3], args[4], args[5], queue_offset, phys, args[6], born,
                                 args[8], args[9], args[10], args[11], args[12], args[13], args[14]};
    size = write_record(self, record_args, 16);
    if (size == NULL) goto done;
    if (key == Py_None) {
        entry = PyBytes_FromStringAndSize(NULL, 0);
    } else {
        long long qo, tags, n = PyLong_AsLongLong(size);
        if (!ranged(queue_offset, INT64_MIN, INT64_MAX - 1, "queue_offset", &qo)) goto done;
        if (tags_code == Py_None ? tags_hash(args[14], &tags) < 0
                                 : !ranged(tags_code, INT64_MIN, INT64_MAX, "tags_code", &tags))
            goto done;
        PyObject *next = PyLong_FromLongLong(qo + 1);
        if (next == NULL) goto done;
        int failed = PyDict_SetItem(queue_offsets, key, next);
        Py_DECREF(next);
        if (failed) goto done;
        entry = PyBytes_FromStringAndSize(NULL, 20);
        if (entry == NULL) goto done;
        unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entry);
        put64(e, (uint64_t)(base + pos));
        put32(e + 8, (uint32_t)n);
        put64(e + 12, (uint64_t)tags);
    }
    if (entry == NULL) goto done;
    end = PyNumber_Add(phys, size);
    if (end == NULL) goto done;
    /* the class's own tuple, filled in place (what tuple.__new__(cls, fields) makes, without the copy) */
    record = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 7);
    if (record == NULL) goto done;
    PyObject *items[7] = {phys, end, topic, args[4], queue_offset, entry, args[9]};
    for (int i = 0; i < 7; i++) PyTuple_SET_ITEM(record, i, Py_NewRef(items[i]));
    PyObject *appended = PyObject_CallMethodOneArg(prepared, append_str, record);
    if (appended == NULL) goto done;
    Py_DECREF(appended);
    result = Py_NewRef(queue_offset);
done:
    Py_XDECREF(queue_offset);
    Py_XDECREF(phys);
    Py_XDECREF(born);
    Py_XDECREF(size);
    Py_XDECREF(end);
    Py_XDECREF(entry);
    Py_XDECREF(record);
    return result;
}

PyDoc_STRVAR(offset_msg_id_doc,
"offset_msg_id(store_host, physical_offset) -> str: protocol/message_id.py's offset_msg_id.");

static PyObject *offset_msg_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char hex[] = "0123456789ABCDEF";
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "offset_msg_id(store_host: bytes, physical_offset: int)");
        return NULL;
    }
    long long offset;
    if (!ranged(args[1], INT64_MIN, INT64_MAX, "physical_offset", &offset)) return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (n > 64) {
        PyErr_SetString(PyExc_ValueError, "a packed host is 8 or 20 bytes");
        return NULL;
    }
    unsigned char raw[72];
    memcpy(raw, PyBytes_AS_STRING(args[0]), (size_t)n);
    put64(raw + n, (uint64_t)offset);
    PyObject *id = PyUnicode_New(2 * (n + 8), 127);
    if (id == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(id);
    for (Py_ssize_t i = 0; i < n + 8; i++) {
        out[2 * i] = (Py_UCS1)hex[raw[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)hex[raw[i] & 15];
    }
    return id;
}

PyDoc_STRVAR(find_property_doc,
"find_property(props, key) -> bytes | None: protocol/properties.py's find_property (key ends with \\x01).");

static PyObject *find_property(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "find_property(props, key)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        if (py_find == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "find_property: bind_find_property first");
            return NULL;
        }
        return PyObject_Vectorcall(py_find, args, 2, NULL);
    }
    Py_ssize_t len;
    const char *value = property_value(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                                       PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]), &len);
    if (value == NULL) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(value, len);
}

PyDoc_STRVAR(send_answer_doc,
"send_answer(opaque, msg_id, queue_id, queue_offset, transaction_id, region, trace_on) -> bytes | None:\n"
"the length fields and JSON header of a SUCCESS answer to a send (broker/processors/send.py's\n"
"py_send_answer), or None when a text is not plain ASCII (the reference encodes it then).");

static PyObject *answer_head; /* b'{"code":0,"language":...,"version":...,"opaque":' */

/* Printable ASCII that JSON writes as it is (no quote, backslash or control character). */
static int plain_text(PyObject *s, const char **out, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) return 0;
    *n = PyUnicode_GET_LENGTH(s);
    *out = (const char *)PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < *n; i++) {
        char c = (*out)[i];
        if (c < 0x20 || c == '"' || c == '\\' || c == 0x7F) return 0;
    }
    return 1;
}

static char *put_text(char *q, const char *s, Py_ssize_t n) {
    memcpy(q, s, (size_t)n);
    return q + n;
}

#define PUT_LITERAL(q, lit) put_text((q), (lit), (Py_ssize_t)(sizeof(lit) - 1))

static PyObject *send_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "send_answer takes 7 arguments");
        return NULL;
    }
    if (answer_head == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "send_answer: bind_answer(head) first");
        return NULL;
    }
    long long opaque, queue_id, queue_offset;
    if (!ranged(args[0], INT_MIN32, INT_MAX32, "opaque", &opaque) ||
        !ranged(args[2], INT_MIN32, INT_MAX32, "queue_id", &queue_id) ||
        !ranged(args[3], INT64_MIN, INT64_MAX, "queue_offset", &queue_offset))
        return NULL;
    const char *text[4];
    Py_ssize_t len[4] = {0, 0, 0, 0};
    PyObject *strings[4] = {args[1], args[4], args[5], args[6]};
    for (int i = 0; i < 4; i++) {
        if (i == 1 && strings[i] == Py_None) continue;
        if (!plain_text(strings[i], &text[i], &len[i])) Py_RETURN_NONE;
    }
    char numbers[3][24];
    int digits[3] = {
        snprintf(numbers[0], sizeof numbers[0], "%lld", opaque),
        snprintf(numbers[1], sizeof numbers[1], "%lld", queue_id),
        snprintf(numbers[2], sizeof numbers[2], "%lld", queue_offset),
    };
    Py_ssize_t head = PyBytes_GET_SIZE(answer_head);
    Py_ssize_t size = 8 + head + digits[0] + digits[1] + digits[2] + len[0] + len[1] + len[2] + len[3] + 160;
    PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
    if (frame == NULL) return NULL;
    char *start = PyBytes_AS_STRING(frame), *q = start + 8;
    q = put_text(q, PyBytes_AS_STRING(answer_head), head);
    q = put_text(q, numbers[0], digits[0]);
    q = PUT_LITERAL(q, ",\"flag\":1,\"extFields\":{\"msgId\":\"");
    q = put_text(q, text[0], len[0]);
    q = PUT_LITERAL(q, "\",\"queueId\":\"");
    q = put_text(q, numbers[1], digits[1]);
    q = PUT_LITERAL(q, "\",\"queueOffset\":\"");
    q = put_text(q, numbers[2], digits[2]);
    q = PUT_LITERAL(q, "\",\"MSG_REGION\":\"");
    q = put_text(q, text[2], len[2]);
    q = PUT_LITERAL(q, "\",\"TRACE_ON\":\"");
    q = put_text(q, text[3], len[3]);
    if (len[1] > 0) { /* None or "": no transactionId */
        q = PUT_LITERAL(q, "\",\"transactionId\":\"");
        q = put_text(q, text[1], len[1]);
    }
    q = PUT_LITERAL(q, "\"}}");
    Py_ssize_t header = q - start - 8;
    put32((unsigned char *)start, (uint32_t)(4 + header));
    put32((unsigned char *)start + 4, (uint32_t)header); /* serialize type JSON (0) in the top byte */
    if (_PyBytes_Resize(&frame, q - start) < 0) return NULL;
    return frame;
}

PyDoc_STRVAR(bind_answer_doc,
"bind_answer(head): the answer header's constant start, up to '\"opaque\":' (send_answer's).");

static PyObject *bind_answer(PyObject *self, PyObject *head) {
    if (!PyBytes_CheckExact(head)) {
        PyErr_SetString(PyExc_TypeError, "bind_answer(head: bytes)");
        return NULL;
    }
    Py_XSETREF(answer_head, Py_NewRef(head));
    Py_RETURN_NONE;
}

static PyObject *bound(PyObject **slot, PyObject *fn) {
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "a function is expected");
        return NULL;
    }
    Py_XSETREF(*slot, Py_NewRef(fn));
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bind_doc, "bind(crc32): the body CRC function write_record calls (isal's crc32).");

static PyObject *bind(PyObject *self, PyObject *fn) { return bound(&crc32, fn); }

PyDoc_STRVAR(bind_find_property_doc,
"bind_find_property(fn): the Python find_property, which answers for texts other than bytes.");

static PyObject *bind_find_property(PyObject *self, PyObject *fn) { return bound(&py_find, fn); }

static PyMethodDef put_methods[] = {
    {"bind", bind, METH_O, bind_doc},
    {"bind_find_property", bind_find_property, METH_O, bind_find_property_doc},
    {"send_header", send_header, METH_O, send_header_doc},
    {"append", (PyCFunction)(void (*)(void))append, METH_FASTCALL, append_doc},
    {"offset_msg_id", (PyCFunction)(void (*)(void))offset_msg_id, METH_FASTCALL, offset_msg_id_doc},
    {"find_property", (PyCFunction)(void (*)(void))find_property, METH_FASTCALL, find_property_doc},
    {"write_record", (PyCFunction)(void (*)(void))write_record, METH_FASTCALL, write_record_doc},
    {"send_answer", (PyCFunction)(void (*)(void))send_answer, METH_FASTCALL, send_answer_doc},
    {"bind_answer", bind_answer, METH_O, bind_answer_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef put_module = {
    PyModuleDef_HEAD_INIT, "put", "The per-send put path: send headers, CommitLog records and send answers.", -1, put_methods,
};

PyMODINIT_FUNC PyInit_put(void) {
    PyObject **keys[] = {&k_a, &k_b, &k_c, &k_d, &k_e, &k_f, &k_g, &k_h, &k_i, &k_j, &k_k, &k_l, &k_m,
                         &k_bname, &k_long_group, &s_true, &s_false};
    const char *texts[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
                           "bname", "producerGroup", "true", "false"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        *keys[i] = PyUnicode_InternFromString(texts[i]);
        if (*keys[i] == NULL) return NULL;
    }
    append_str = PyUnicode_InternFromString("append");
    if (append_str == NULL) return NULL;
    return PyModule_Create(&put_module);
}
