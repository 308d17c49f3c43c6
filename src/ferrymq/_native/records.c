/* Consumer-side record decoding in C: protocol/message_ext.py's decode_records / _decode_at (the
 * reference, same checks, same errors) building MessageExt objects directly.
 *
 * MessageExt is a slotted class; `bind` is given the class and its slot names once, checks each is a
 * plain object slot, and keeps their offsets, so each message costs one allocation and field
 * stores, no attribute lookups. Bodies are bytes copies of the answer's slices (as in Python);
 * properties stay undecoded text until first read (MessageExt.properties).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define MIN_RECORD_SIZE 91
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20

/* The slots, in this order; bind() receives their names in the same order. */
enum {
    F_TOPIC, F_BODY, F_PROPERTIES, F_PROPERTIES_TEXT, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET,
    F_COMMITLOG_OFFSET, F_SYS_FLAG, F_BORN_TIMESTAMP, F_BORN_HOST, F_STORE_TIMESTAMP, F_STORE_HOST,
    F_RECONSUME_TIMES, F_PREPARED_TRANSACTION_OFFSET, F_BODY_CRC, F_STORE_SIZE, F_COUNT
};

static PyTypeObject *message_type;
static Py_ssize_t offsets[F_COUNT];
static PyObject *decode_error; /* MessageDecodeError */
static PyObject *topics;       /* bytes -> str, shared with the Python decoder */
static PyObject *host_of;      /* packed host bytes -> (ip, port), cached by the Python side */
static PyObject *crc32;        /* isal's, for verify_crc */

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4));
}

PyDoc_STRVAR(bind_doc,
"bind(cls, slot_names, error, topics, host_of, crc32): the class to build, its slots in the decoder's\n"
"order, the exception to raise, the topic cache, the host decoder and the CRC function.");

static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *cls, *names, *error, *topic_cache, *hosts, *crc;
    if (!PyArg_ParseTuple(args, "O!O!OO!OO", &PyType_Type, &cls, &PyTuple_Type, &names, &error, &PyDict_Type,
                          &topic_cache, &hosts, &crc))
        return NULL;
    if (PyTuple_GET_SIZE(names) != F_COUNT) {
        PyErr_SetString(PyExc_ValueError, "wrong number of slot names");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < F_COUNT; i++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, PyTuple_GET_ITEM(names, i));
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%R is not a slot", PyTuple_GET_ITEM(names, i));
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || member->flags & READONLY) {
            PyErr_Format(PyExc_TypeError, "%R is not a writable object slot", PyTuple_GET_ITEM(names, i));
            return NULL;
        }
        offsets[i] = member->offset;
    }
    Py_INCREF(cls);
    Py_XSETREF(message_type, (PyTypeObject *)cls);
    Py_INCREF(error);
    Py_XSETREF(decode_error, error);
    Py_INCREF(topic_cache);
    Py_XSETREF(topics, topic_cache);
    Py_INCREF(hosts);
    Py_XSETREF(host_of, hosts);
    Py_INCREF(crc);
    Py_XSETREF(crc32, crc);
    Py_RETURN_NONE;
}

static inline void set_field(PyObject *obj, int field, PyObject *value) {
    *(PyObject **)((char *)obj + offsets[field]) = value; /* steals `value`; the slot was empty */
}

static PyObject *fail(const char *format, Py_ssize_t pos) {
    PyErr_Format(decode_error, format, pos);
    return NULL;
}

static PyObject *host(const unsigned char *raw, Py_ssize_t len) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw, len);
    if (key == NULL) return NULL;
    PyObject *value = PyObject_CallOneArg(host_of, key);
    Py_DECREF(key);
    return value;
}

/* One message from the record at `pos`; NULL with an exception when it is not a whole record. */
static PyObject *decode_one(PyObject *raw, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, int verify,
                            Py_ssize_t *size_out) {
    if (end - pos < 88) return fail("no valid message record at position %zd", pos);
    const unsigned char *p = b + pos;
    int32_t size = be32(p), magic = be32(p + 4), crc = be32(p + 8), sys_flag = be32(p + 36);
    Py_ssize_t born_len = sys_flag & BORNHOST_V6_FLAG ? 20 : 8, store_len = sys_flag & STOREHOST_V6_FLAG ? 20 : 8;
    Py_ssize_t fixed = 72 + born_len + store_len;
    if (end - pos < fixed) return fail("no valid message record at position %zd", pos);
    int32_t body_len = be32(p + fixed - 4);
    Py_ssize_t body_start = pos + fixed, q = body_start + (Py_ssize_t)body_len, record_end = pos + (Py_ssize_t)size;
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || size < MIN_RECORD_SIZE || record_end > end || body_len < 0 ||
        q + 3 > record_end)
        return fail("no valid message record at position %zd", pos);
    Py_ssize_t topic_start, topic_end;
    if (magic == MAGIC_V1) {
        topic_start = q + 1;
        topic_end = topic_start + b[q];
    } else {
        topic_start = q + 2;
        topic_end = topic_start + (((Py_ssize_t)b[q] << 8) | b[q + 1]);
    }
    if (topic_end + 2 > record_end ||
        (int16_t)(((uint16_t)b[topic_end] << 8) | b[topic_end + 1]) != record_end - topic_end - 2)
        return fail("record at position %zd has inconsistent lengths", pos);
    PyObject *body = PyBytes_FromStringAndSize((const char *)b + body_start, body_len);
    if (body == NULL) return NULL;
    if (verify) {
        PyObject *c = PyObject_CallOneArg(crc32, body);
        if (c == NULL) goto body_fail;
        long computed = PyLong_AsLong(c) & 0x7FFFFFFF;
        Py_DECREF(c);
        if (computed != crc) {
            Py_DECREF(body);
            return fail("body CRC mismatch in record at position %zd", pos);
        }
    }
    PyObject *raw_topic = PyBytes_FromStringAndSize((const char *)b + topic_start, topic_end - topic_start);
    if (raw_topic == NULL) goto body_fail;
    PyObject *topic = PyDict_GetItemWithError(topics, raw_topic);
    if (topic != NULL) {
        Py_INCREF(topic);
    } else if (!PyErr_Occurred()) {
        topic = PyUnicode_DecodeUTF8((const char *)b + topic_start, topic_end - topic_start, "strict");
        if (topic != NULL) {
            if (PyDict_GET_SIZE(topics) > 10000) PyDict_Clear(topics);
            if (PyDict_SetItem(topics, raw_topic, topic) < 0) Py_CLEAR(topic);
        }
    }
    Py_DECREF(raw_topic);
    PyObject *props = NULL, *born = NULL, *store = NULL, *msg = NULL;
    if (topic == NULL) goto unicode_fail;
    props = PyUnicode_DecodeUTF8((const char *)b + topic_end + 2, record_end - topic_end - 2, "strict");
    if (props == NULL) goto unicode_fail;
    born = host(p + 48, born_len);
    if (born == NULL) goto fields_fail;
    store = host(p + 56 + born_len, store_len);
    if (store == NULL) goto fields_fail;
    msg = message_type->tp_alloc(message_type, 0);
    if (msg == NULL) goto fields_fail;
    PyObject *ints[] = {
        PyLong_FromLong(be32(p + 12)), PyLong_FromLong(be32(p + 16)), PyLong_FromLongLong(be64(p + 20)),
        PyLong_FromLongLong(be64(p + 28)), PyLong_FromLong(sys_flag), PyLong_FromLongLong(be64(p + 40)),
        PyLong_FromLongLong(be64(p + 48 + born_len)), PyLong_FromLong(be32(p + 56 + born_len + store_len)),
        PyLong_FromLongLong(be64(p + 60 + born_len + store_len)), PyLong_FromLong(crc), PyLong_FromLong(size),
    };
    static const int int_fields[] = {
        F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET, F_COMMITLOG_OFFSET, F_SYS_FLAG, F_BORN_TIMESTAMP, F_STORE_TIMESTAMP,
        F_RECONSUME_TIMES, F_PREPARED_TRANSACTION_OFFSET, F_BODY_CRC, F_STORE_SIZE,
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (ints[i] == NULL) ok = 0;
        else set_field(msg, int_fields[i], ints[i]);
    }
    set_field(msg, F_TOPIC, topic);
    set_field(msg, F_BODY, body);
    Py_INCREF(Py_None);
    set_field(msg, F_PROPERTIES, Py_None);
    set_field(msg, F_PROPERTIES_TEXT, props);
    set_field(msg, F_BORN_HOST, born);
    set_field(msg, F_STORE_HOST, store);
    if (!ok) {
        Py_DECREF(msg);
        return NULL;
    }
    *size_out = size;
    return msg;
unicode_fail:
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        PyErr_Format(decode_error, "record at position %zd is not UTF-8 where it must be", pos);
    }
fields_fail:
    Py_XDECREF(topic);
    Py_XDECREF(props);
    Py_XDECREF(born);
    Py_XDECREF(store);
body_fail:
    Py_DECREF(body);
    return NULL;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(raw: bytes, verify_crc: bool) -> list[MessageExt]: concatenated records, e.g. a pull answer.");

static PyObject *decode_records(PyObject *self, PyObject *args) {
    PyObject *raw;
    int verify;
    if (!PyArg_ParseTuple(args, "O!p", &PyBytes_Type, &raw, &verify)) return NULL;
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "records.bind() was not called");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t pos = 0, end = PyBytes_GET_SIZE(raw);
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while (pos < end) {
        Py_ssize_t size;
        PyObject *msg = decode_one(raw, b, pos, end, verify, &size);
        if (msg == NULL || PyList_Append(out, msg) < 0) {
            Py_XDECREF(msg);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(msg);
        pos += size;
    }
    return out;
}

static PyMethodDef records_methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef records_module = {
    PyModuleDef_HEAD_INIT, "records", "Consumer-side record decoding.", -1, records_methods,
};

PyMODINIT_FUNC PyInit_records(void) { return PyModule_Create(&records_module); }
