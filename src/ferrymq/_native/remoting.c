/* The remoting frame codec in C: protocol/remoting.py's FrameDecoder loop and
 * RemotingCommand.encode_parts (the reference, same contract and same bytes).
 *
 * Only what the Python codec decodes the ordinary way is done here: a JSON header of integers,
 * strings and an extFields object of strings (unknown keys with scalar values skipped), or a
 * ROCKETMQ binary header. Anything else (numbers as strings, non-string extFields values, nested
 * unknown values, bad UTF-8, any malformed header) goes to the Python decoder of that frame, which
 * decides, so the two agree by construction on every input that is not plain. Likewise an encode
 * this code does not handle returns None and the caller encodes in Python.
 *
 * Commands are made without running RemotingCommand.__init__: bind() reads the offsets of the
 * dataclass's slots, and every slot is filled here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define MAX_HEADER 0xFFFFFF
#define SUPPORTED 0
#define UNSUPPORTED 1 /* not plain: the Python decoder of the frame decides */
#define FAILED (-1)   /* a Python exception is set */

enum { F_CODE, F_LANGUAGE, F_VERSION, F_OPAQUE, F_FLAG, F_REMARK, F_EXT, F_BODY, F_SERIALIZE, N_FIELDS };
static const char *FIELD_NAMES[N_FIELDS] = {"code", "language", "version", "opaque", "flag",
                                            "remark", "ext_fields", "body", "serialize_type"};

static struct {
    PyTypeObject *command;
    Py_ssize_t offset[N_FIELDS];
    PyObject *languages;     /* name or number -> LanguageCode */
    PyObject *other;         /* LanguageCode.OTHER */
    PyObject *names;         /* LanguageCode -> its name */
    PyObject *serialize[2];  /* SerializeType.JSON, SerializeType.ROCKETMQ */
    PyObject *error;         /* RemotingProtocolError */
    PyObject *fallback;      /* remoting._decode_payload(view) */
    PyObject *empty;         /* b"" */
} S;

#define SLOT(obj, f) (*(PyObject **)((char *)(obj) + S.offset[f]))

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

/* --- decoding -------------------------------------------------------------------------------- */

typedef struct {
    int64_t ints[5]; /* code, language (when a number), version, opaque, flag */
    PyObject *language_name, *remark, *ext;
    int language_is_number; /* -1: absent (OTHER), 0: a name, 1: a number */
} Header;

static void header_clear(Header *h) {
    Py_CLEAR(h->language_name);
    Py_CLEAR(h->remark);
    Py_CLEAR(h->ext);
}

typedef struct {
    const unsigned char *p, *end;
} Cursor;

/* JSON's one-letter escapes and what they stand for; '/' last: it is read escaped, never written so. */
static const char ESCAPED[] = "\"\\bfnrt/";
static const char UNESCAPED[] = "\"\\\b\f\n\r\t/";

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int hex4(const unsigned char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= ch - '0';
        else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* Short ASCII strings recur in every header (keys, "0", "false", topics, groups): the last one seen
 * in each of a few slots is handed out again, so it is neither made nor hashed again. */
#define CACHED_MAX 16
#define CACHE_SLOTS 256
static PyObject *cache[CACHE_SLOTS];

static PyObject *cached_ascii(const char *s, Py_ssize_t n) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] >= 0x80) return NULL;
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    }
    PyObject **slot = &cache[h % CACHE_SLOTS];
    if (*slot != NULL && PyUnicode_GET_LENGTH(*slot) == n && memcmp(PyUnicode_DATA(*slot), s, n) == 0)
        return Py_NewRef(*slot);
    PyObject *str = PyUnicode_FromStringAndSize(s, n);
    if (str == NULL) return NULL;
    (void)PyObject_Hash(str); /* kept with the string: dict inserts of it need not hash it again */
    Py_XSETREF(*slot, Py_NewRef(str));
    return str;
}

static PyObject *utf8(const char *s, Py_ssize_t n) {
    if (n <= CACHED_MAX) {
        PyObject *str = cached_ascii(s, n);
        if (str != NULL || PyErr_Occurred()) return str;
    }
    PyObject *str = PyUnicode_DecodeUTF8(s, n, "strict");
    if (str == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return str; /* NULL with no exception set: not UTF-8, unsupported */
}

/* A JSON string at c->p (its opening quote) into *out. */
static int parse_string(Cursor *c, PyObject **out) {
    if (c->p >= c->end || *c->p != '"') return UNSUPPORTED;
    const unsigned char *start = ++c->p, *p = start;
    int escaped = 0;
    while (p < c->end && *p != '"') {
        if (*p < 0x20) return UNSUPPORTED;
        if (*p == '\\') {
            escaped = 1;
            p++;
            if (p >= c->end) return UNSUPPORTED;
        }
        p++;
    }
    if (p >= c->end) return UNSUPPORTED;
    c->p = p + 1;
    if (!escaped) {
        *out = utf8((const char *)start, p - start);
        return *out != NULL ? SUPPORTED : (PyErr_Occurred() ? FAILED : UNSUPPORTED);
    }
    char *buf = PyMem_Malloc(p - start), *w = buf; /* unescaping never lengthens a string */
    if (buf == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    for (const unsigned char *r = start; r < p;) {
        if (*r != '\\') {
            *w++ = (char)*r++;
            continue;
        }
        r++;
        unsigned char e = *r++;
        const char *named = e ? strchr(ESCAPED, e) : NULL;
        if (named != NULL) {
            *w++ = UNESCAPED[named - ESCAPED];
            continue;
        }
        switch (e) {
            case 'u': {
                uint32_t cp, low;
                if (p - r < 4 || !hex4(r, &cp)) goto unsupported;
                r += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) goto unsupported; /* a lone low surrogate */
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (p - r < 6 || r[0] != '\\' || r[1] != 'u' || !hex4(r + 2, &low) || low < 0xDC00 ||
                        low > 0xDFFF)
                        goto unsupported;
                    r += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                if (cp < 0x80) {
                    *w++ = (char)cp;
                } else if (cp < 0x800) {
                    *w++ = (char)(0xC0 | (cp >> 6));
                    *w++ = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    *w++ = (char)(0xE0 | (cp >> 12));
                    *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *w++ = (char)(0x80 | (cp & 0x3F));
                } else {
                    *w++ = (char)(0xF0 | (cp >> 18));
                    *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                    *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *w++ = (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: goto unsupported;
        }
    }
    *out = utf8(buf, w - buf);
    PyMem_Free(buf);
    return *out != NULL ? SUPPORTED : (PyErr_Occurred() ? FAILED : UNSUPPORTED);
unsupported:
    PyMem_Free(buf);
    return UNSUPPORTED;
}

/* A JSON integer (no fraction, no exponent) within a Java int. */
static int parse_int32(Cursor *c, int64_t *out) {
    const unsigned char *p = c->p;
    int negative = p < c->end && *p == '-';
    p += negative;
    if (p >= c->end || *p < '0' || *p > '9') return UNSUPPORTED;
    int64_t v = 0;
    const unsigned char *digits = p;
    while (p < c->end && *p >= '0' && *p <= '9') {
        if (p - digits >= 11) return UNSUPPORTED;
        v = v * 10 + (*p++ - '0');
    }
    if ((*digits == '0' && p - digits > 1) ||
        (p < c->end && (*p == '.' || *p == 'e' || *p == 'E')))
        return UNSUPPORTED;
    v = negative ? -v : v;
    if (v < INT32_MIN || v > INT32_MAX) return UNSUPPORTED;
    c->p = p;
    *out = v;
    return SUPPORTED;
}

static int literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* An unknown key's value: a scalar is skipped (a string checked as the Python decoder would). */
static int skip_value(Cursor *c) {
    if (c->p >= c->end) return UNSUPPORTED;
    unsigned char ch = *c->p;
    if (ch == '"') {
        PyObject *s = NULL;
        int rc = parse_string(c, &s);
        Py_XDECREF(s);
        return rc;
    }
    if (literal(c, "true") || literal(c, "false") || literal(c, "null")) return SUPPORTED;
    if (ch == '-' || (ch >= '0' && ch <= '9')) { /* a JSON number, checked to its grammar */
        const unsigned char *p = c->p + (ch == '-');
        if (p >= c->end || *p < '0' || *p > '9') return UNSUPPORTED;
        if (*p == '0') p++;
        else while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p < c->end && *p == '.') {
            p++;
            if (p >= c->end || *p < '0' || *p > '9') return UNSUPPORTED;
            while (p < c->end && *p >= '0' && *p <= '9') p++;
        }
        if (p < c->end && (*p == 'e' || *p == 'E')) {
            p++;
            if (p < c->end && (*p == '+' || *p == '-')) p++;
            if (p >= c->end || *p < '0' || *p > '9') return UNSUPPORTED;
            while (p < c->end && *p >= '0' && *p <= '9') p++;
        }
        c->p = p;
        return SUPPORTED;
    }
    return UNSUPPORTED; /* objects and arrays: rare, left to the Python decoder */
}

static int parse_ext(Cursor *c, PyObject **out) {
    if (literal(c, "null")) {
        Py_CLEAR(*out);
        return SUPPORTED;
    }
    if (c->p >= c->end || *c->p != '{') return UNSUPPORTED;
    c->p++;
    PyObject *ext = PyDict_New();
    if (ext == NULL) return FAILED;
    int rc = SUPPORTED;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        goto done;
    }
    for (;;) {
        PyObject *key = NULL, *value = NULL;
        skip_ws(c);
        if ((rc = parse_string(c, &key)) != SUPPORTED) goto done;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') {
            Py_DECREF(key);
            rc = UNSUPPORTED;
            goto done;
        }
        c->p++;
        skip_ws(c);
        if ((rc = parse_string(c, &value)) != SUPPORTED) {
            Py_DECREF(key);
            goto done;
        }
        int set = PyDict_SetItem(ext, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (set < 0) {
            rc = FAILED;
            goto done;
        }
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            break;
        }
        rc = UNSUPPORTED;
        goto done;
    }
done:
    if (rc != SUPPORTED) {
        Py_DECREF(ext);
        return rc;
    }
    Py_XSETREF(*out, ext);
    return SUPPORTED;
}

static int key_is(const unsigned char *k, Py_ssize_t n, const char *name) {
    return (size_t)n == strlen(name) && memcmp(k, name, n) == 0;
}

static int decode_json(const unsigned char *data, Py_ssize_t n, Header *h) {
    Cursor c = {data, data + n};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{') return UNSUPPORTED;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
        goto end;
    }
    for (;;) {
        skip_ws(&c);
        if (c.p >= c.end || *c.p != '"') return UNSUPPORTED;
        const unsigned char *k = ++c.p;
        while (c.p < c.end && *c.p != '"' && *c.p != '\\' && *c.p >= 0x20 && *c.p < 0x80) c.p++;
        if (c.p >= c.end || *c.p != '"') return UNSUPPORTED; /* escaped or non-ASCII keys: Python */
        Py_ssize_t kn = c.p++ - k;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return UNSUPPORTED;
        c.p++;
        skip_ws(&c);
        int rc;
        if (key_is(k, kn, "code")) rc = parse_int32(&c, &h->ints[0]);
        else if (key_is(k, kn, "version")) rc = parse_int32(&c, &h->ints[2]);
        else if (key_is(k, kn, "opaque")) rc = parse_int32(&c, &h->ints[3]);
        else if (key_is(k, kn, "flag")) rc = parse_int32(&c, &h->ints[4]);
        else if (key_is(k, kn, "language")) {
            Py_CLEAR(h->language_name);
            if (c.p < c.end && *c.p == '"') {
                h->language_is_number = 0;
                rc = parse_string(&c, &h->language_name);
            } else {
                h->language_is_number = 1;
                rc = parse_int32(&c, &h->ints[1]);
            }
        } else if (key_is(k, kn, "remark")) {
            Py_CLEAR(h->remark);
            rc = literal(&c, "null") ? SUPPORTED : parse_string(&c, &h->remark);
        } else if (key_is(k, kn, "extFields")) {
            rc = parse_ext(&c, &h->ext);
        } else {
            rc = skip_value(&c);
        }
        if (rc != SUPPORTED) return rc;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            break;
        }
        return UNSUPPORTED;
    }
end:
    skip_ws(&c);
    return c.p == c.end ? SUPPORTED : UNSUPPORTED;
}

static PyObject *decode_string(const unsigned char *p, Py_ssize_t n, int *rc) {
    PyObject *s = utf8((const char *)p, n);
    *rc = s != NULL ? SUPPORTED : (PyErr_Occurred() ? FAILED : UNSUPPORTED);
    return s;
}

static int decode_binary(const unsigned char *d, Py_ssize_t n, Header *h) {
    if (n < 17) return UNSUPPORTED;
    h->ints[0] = (int16_t)be16(d);
    h->ints[1] = (int8_t)d[2];
    h->language_is_number = 1;
    h->ints[2] = (int16_t)be16(d + 3);
    h->ints[3] = (int32_t)be32(d + 5);
    h->ints[4] = (int32_t)be32(d + 9);
    int64_t remark_len = (int32_t)be32(d + 13);
    int rc = SUPPORTED;
    if (remark_len < 0 || 17 + remark_len + 4 > n) return UNSUPPORTED;
    if (remark_len && (h->remark = decode_string(d + 17, remark_len, &rc)) == NULL) return rc;
    int64_t pos = 17 + remark_len, ext_len = (int32_t)be32(d + pos);
    pos += 4;
    int64_t end = pos + ext_len;
    if (ext_len < 0 || end > n) return UNSUPPORTED;
    if ((h->ext = PyDict_New()) == NULL) return FAILED;
    while (pos < end) {
        int64_t key_len = (int16_t)be16(d + pos), key_at = pos + 2;
        if (pos + 2 > end || key_len < 0 || key_at + key_len + 4 > end) return UNSUPPORTED;
        int64_t value_len = (int32_t)be32(d + key_at + key_len), value_at = key_at + key_len + 4;
        if (value_len < 0 || value_at + value_len > end) return UNSUPPORTED;
        pos = value_at + value_len;
        if (!key_len || !value_len) continue; /* Java reads empty strings back as null */
        PyObject *key = decode_string(d + key_at, key_len, &rc);
        if (key == NULL) return rc;
        PyObject *value = decode_string(d + value_at, value_len, &rc);
        if (value == NULL) {
            Py_DECREF(key);
            return rc;
        }
        int set = PyDict_SetItem(h->ext, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (set < 0) return FAILED;
    }
    return SUPPORTED;
}

static PyObject *language_of(Header *h) {
    if (h->language_is_number < 0) return Py_NewRef(S.other);
    PyObject *key = h->language_is_number ? PyLong_FromLongLong(h->ints[1]) : Py_NewRef(h->language_name);
    if (key == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(S.languages, key);
    Py_DECREF(key);
    if (found == NULL && PyErr_Occurred()) return NULL;
    return Py_NewRef(found != NULL ? found : S.other);
}

/* The command of one frame: data[start:end] is what follows its length field. */
static PyObject *decode_payload(PyObject *data, PyObject **view, Py_ssize_t start, Py_ssize_t end) {
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data) + start;
    uint32_t word = be32(p);
    Py_ssize_t header_end = start + 4 + (word & MAX_HEADER);
    int type = word >> 24, rc = UNSUPPORTED;
    Header h = {{0, 0, 0, 0, 0}, NULL, NULL, NULL, -1};
    if (header_end <= end && (type == 0 || type == 1)) {
        if (type == 0) {
            rc = decode_json(p + 4, header_end - start - 4, &h);
        } else {
            rc = decode_binary(p + 4, header_end - start - 4, &h);
        }
    }
    if (rc == FAILED) {
        header_clear(&h);
        return NULL;
    }
    if (*view == NULL && (*view = PyMemoryView_FromObject(data)) == NULL) {
        header_clear(&h);
        return NULL;
    }
    if (rc == UNSUPPORTED) {
        header_clear(&h);
        PyObject *payload = PySequence_GetSlice(*view, start, end);
        if (payload == NULL) return NULL;
        PyObject *command = PyObject_CallOneArg(S.fallback, payload);
        Py_DECREF(payload);
        return command;
    }
    PyObject *values[N_FIELDS] = {NULL};
    values[F_CODE] = PyLong_FromLongLong(h.ints[0]);
    values[F_LANGUAGE] = language_of(&h);
    values[F_VERSION] = PyLong_FromLongLong(h.ints[2]);
    values[F_OPAQUE] = PyLong_FromLongLong(h.ints[3]);
    values[F_FLAG] = PyLong_FromLongLong(h.ints[4]);
    values[F_REMARK] = h.remark != NULL ? Py_NewRef(h.remark) : Py_NewRef(Py_None);
    values[F_EXT] = h.ext != NULL ? Py_NewRef(h.ext) : PyDict_New();
    values[F_BODY] = end > header_end ? PySequence_GetSlice(*view, header_end, end) : Py_NewRef(S.empty);
    values[F_SERIALIZE] = Py_NewRef(S.serialize[type]);
    header_clear(&h);
    PyObject *command = NULL;
    for (int f = 0; f < N_FIELDS; f++)
        if (values[f] == NULL) goto done;
    if ((command = S.command->tp_alloc(S.command, 0)) == NULL) goto done;
    for (int f = 0; f < N_FIELDS; f++) {
        SLOT(command, f) = values[f];
        values[f] = NULL;
    }
done:
    for (int f = 0; f < N_FIELDS; f++) Py_XDECREF(values[f]);
    return command;
}

PyDoc_STRVAR(split_doc,
"split(data: bytes, max_frame_size) -> (commands, end of the last whole frame, bytes the next step needs)\n"
"The loop of FrameDecoder.feed over whole bytes; RemotingProtocolError on a bad length.");

static PyObject *split(PyObject *self, PyObject *args) {
    PyObject *data;
    Py_ssize_t max_frame_size;
    if (S.command == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "remoting accelerator is not bound");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!n", &PyBytes_Type, &data, &max_frame_size)) return NULL;
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t pos = 0, end = PyBytes_GET_SIZE(data), needed = 4;
    PyObject *commands = PyList_New(0), *view = NULL;
    if (commands == NULL) return NULL;
    for (;;) {
        if (end - pos < 4) {
            needed = 4;
            break;
        }
        int64_t size = 4 + (int64_t)(int32_t)be32(base + pos);
        if (size < 8) {
            PyErr_Format(S.error, "frame length %lld is shorter than its header word", (long long)(size - 4));
            goto fail;
        }
        if (size > max_frame_size) {
            PyErr_Format(S.error, "frame of %lld bytes exceeds the %zd cap", (long long)size, max_frame_size);
            goto fail;
        }
        if (end - pos < size) {
            needed = (Py_ssize_t)size;
            break;
        }
        PyObject *command = decode_payload(data, &view, pos + 4, pos + (Py_ssize_t)size);
        if (command == NULL) goto fail;
        int appended = PyList_Append(commands, command);
        Py_DECREF(command);
        if (appended < 0) goto fail;
        pos += (Py_ssize_t)size;
    }
    Py_XDECREF(view);
    return Py_BuildValue("(Nnn)", commands, pos, needed);
fail:
    Py_XDECREF(view);
    Py_DECREF(commands);
    return NULL;
}

/* --- encoding -------------------------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char local[512];
} Buffer;

static int grow(Buffer *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 1;
    Py_ssize_t cap = (b->len + more) * 2;
    char *data = b->data == b->local ? PyMem_Malloc(cap) : PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    if (b->data == b->local) memcpy(data, b->local, b->len);
    b->data = data;
    b->cap = cap;
    return 1;
}

static int put(Buffer *b, const char *s, Py_ssize_t n) {
    if (!grow(b, n)) return 0;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 1;
}

static int put_int(Buffer *b, long long v) {
    char digits[24], *end = digits + sizeof digits, *p = end;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    return put(b, p, end - p);
}

/* A str's UTF-8 (kept with the str): 1, or 0 for one with a lone surrogate (left to Python), -1: error. */
static int utf8_of(PyObject *s, const char **u, Py_ssize_t *n) {
    if ((*u = PyUnicode_AsUTF8AndSize(s, n)) != NULL) return 1;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* A str as msgspec writes it: quotes, backslashes and control characters escaped, the rest UTF-8.
 * 0: not encodable here (a lone surrogate), -1: error. */
static int put_json_string(Buffer *b, PyObject *s) {
    Py_ssize_t n;
    const char *u;
    int rc = utf8_of(s, &u, &n);
    if (rc <= 0) return rc;
    if (!grow(b, n * 6 + 2)) return -1;
    char *w = b->data + b->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)u[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            *w++ = (char)ch;
            continue;
        }
        *w++ = '\\';
        const char *named = ch ? memchr(UNESCAPED, ch, sizeof UNESCAPED - 2) : NULL; /* not '/' */
        if (named != NULL) {
            *w++ = ESCAPED[named - UNESCAPED];
        } else {
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = "0123456789abcdef"[ch >> 4];
            *w++ = "0123456789abcdef"[ch & 15];
        }
    }
    *w++ = '"';
    b->len = w - b->data;
    return 1;
}

/* An int field's value, exact ints and int enums only (a bool, like a float, is left to Python). */
static int int_of(PyObject *v, long long *out) {
    if (v == NULL || !PyLong_Check(v) || PyBool_Check(v)) return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* 1: written, 0: left to Python, -1: error. */
static int encode_json(PyObject *cmd, long long ints[5], Buffer *b) {
    PyObject *language = SLOT(cmd, F_LANGUAGE);
    if (Py_TYPE(language) != Py_TYPE(S.other)) return 0; /* not a LanguageCode: Python raises */
    PyObject *name = PyDict_GetItemWithError(S.names, language);
    if (name == NULL) return PyErr_Occurred() ? -1 : 0;
    static const char *keys[5] = {"{\"code\":", ",\"language\":", ",\"version\":", ",\"opaque\":", ",\"flag\":"};
    for (int i = 0; i < 5; i++) {
        if (!put(b, keys[i], (Py_ssize_t)strlen(keys[i]))) return -1;
        int rc = i == 1 ? put_json_string(b, name) : put_int(b, ints[i]);
        if (rc <= 0) return rc;
    }
    PyObject *remark = SLOT(cmd, F_REMARK);
    if (remark != Py_None) {
        if (!PyUnicode_CheckExact(remark)) return 0;
        if (!put(b, ",\"remark\":", 10)) return -1;
        int rc = put_json_string(b, remark);
        if (rc <= 0) return rc;
    }
    PyObject *ext = SLOT(cmd, F_EXT), *key, *value;
    Py_ssize_t i = 0;
    int first = 1;
    if (PyDict_GET_SIZE(ext) == 0) return put(b, "}", 1) ? 1 : -1;
    if (!put(b, ",\"extFields\":{", 14)) return -1; /* even when every value is None, as in Python */
    while (PyDict_Next(ext, &i, &key, &value)) {
        if (value == Py_None) continue;
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value)) return 0;
        if (!first && !put(b, ",", 1)) return -1;
        first = 0;
        int rc = put_json_string(b, key);
        if (rc <= 0) return rc;
        if (!put(b, ":", 1)) return -1;
        if ((rc = put_json_string(b, value)) <= 0) return rc;
    }
    return put(b, "}}", 2) ? 1 : -1;
}

static int put_be(Buffer *b, long long v, int width) {
    char bytes[4];
    for (int i = 0; i < width; i++) bytes[i] = (char)(v >> (8 * (width - 1 - i)));
    return put(b, bytes, width);
}

/* A str's UTF-8 with its length before it (width 2 or 4 bytes); 0: left to Python. */
static int put_binary_string(Buffer *b, PyObject *s, int width) {
    Py_ssize_t n;
    const char *u;
    int rc = utf8_of(s, &u, &n);
    if (rc <= 0) return rc;
    if (n > (width == 2 ? INT16_MAX : INT32_MAX)) return 0;
    return put_be(b, n, width) && put(b, u, n) ? 1 : -1;
}

static int encode_binary(PyObject *cmd, long long ints[5], Buffer *b) {
    long long language;
    if (!int_of(SLOT(cmd, F_LANGUAGE), &language)) return 0;
    ints[1] = language;
    static const int widths[5] = {2, 1, 2, 4, 4};
    for (int i = 0; i < 5; i++) {
        long long limit = widths[i] == 4 ? INT32_MAX : widths[i] == 2 ? INT16_MAX : INT8_MAX;
        if (ints[i] > limit || ints[i] < -limit - 1) return 0;
        if (!put_be(b, ints[i], widths[i])) return -1;
    }
    PyObject *remark = SLOT(cmd, F_REMARK);
    int rc;
    if (remark == Py_None || (PyUnicode_CheckExact(remark) && PyUnicode_GET_LENGTH(remark) == 0)) {
        if (!put_be(b, 0, 4)) return -1;
    } else if (!PyUnicode_CheckExact(remark)) {
        return 0;
    } else if ((rc = put_binary_string(b, remark, 4)) <= 0) {
        return rc;
    }
    Py_ssize_t ext_len_at = b->len;
    if (!put_be(b, 0, 4)) return -1;
    PyObject *ext = SLOT(cmd, F_EXT), *key, *value;
    Py_ssize_t i = 0;
    while (PyDict_Next(ext, &i, &key, &value)) {
        if (value == Py_None) continue;
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value)) return 0;
        if ((rc = put_binary_string(b, key, 2)) <= 0 || (rc = put_binary_string(b, value, 4)) <= 0) return rc;
    }
    long long ext_len = b->len - ext_len_at - 4;
    if (ext_len > INT32_MAX) return 0;
    for (int k = 0; k < 4; k++) b->data[ext_len_at + k] = (char)(ext_len >> (8 * (3 - k)));
    return 1;
}

PyDoc_STRVAR(encode_parts_doc,
"encode_parts(command) -> (length fields + header, body), or None where the Python encoder must do it.");

static PyObject *encode_parts(PyObject *self, PyObject *cmd) {
    if (S.command == NULL || Py_TYPE(cmd) != S.command) Py_RETURN_NONE;
    for (int f = 0; f < N_FIELDS; f++)
        if (SLOT(cmd, f) == NULL) Py_RETURN_NONE;
    long long ints[5] = {0};
    static const int int_fields[5] = {F_CODE, -1, F_VERSION, F_OPAQUE, F_FLAG};
    for (int i = 0; i < 5; i++)
        if (int_fields[i] >= 0 && !int_of(SLOT(cmd, int_fields[i]), &ints[i])) Py_RETURN_NONE;
    PyObject *type = SLOT(cmd, F_SERIALIZE), *body = SLOT(cmd, F_BODY);
    if (!PyDict_CheckExact(SLOT(cmd, F_EXT))) Py_RETURN_NONE;
    int binary = type == S.serialize[1];
    if (!binary && type != S.serialize[0]) Py_RETURN_NONE;
    Py_ssize_t body_len = PyObject_Size(body);
    if (body_len < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Buffer b;
    b.data = b.local;
    b.cap = sizeof b.local;
    b.len = 8; /* the length fields, written last */
    int rc = binary ? encode_binary(cmd, ints, &b) : encode_json(cmd, ints, &b);
    PyObject *result = NULL;
    Py_ssize_t header_len = b.len - 8;
    if (rc < 0) goto done;
    if (rc == 0 || header_len > MAX_HEADER || 4 + header_len + (long long)body_len > INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    long long total = 4 + header_len + body_len, word = ((long long)binary << 24) | header_len;
    for (int k = 0; k < 4; k++) {
        b.data[k] = (char)(total >> (8 * (3 - k)));
        b.data[4 + k] = (char)(word >> (8 * (3 - k)));
    }
    PyObject *head = PyBytes_FromStringAndSize(b.data, b.len);
    if (head != NULL) result = PyTuple_Pack(2, head, body);
    Py_XDECREF(head);
done:
    if (b.data != b.local) PyMem_Free(b.data);
    return result;
}

/* --- binding --------------------------------------------------------------------------------- */

PyDoc_STRVAR(bind_doc,
"bind(RemotingCommand, languages, other, names, (JSON, ROCKETMQ), RemotingProtocolError, decode_payload)\n"
"What the codec builds and falls back on: the command class (a slots dataclass), the language\n"
"lookups, the serialize types, the error to raise and the Python decoder of one frame.");

static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *cls, *languages, *other, *names, *json, *binary, *error, *fallback;
    if (!PyArg_ParseTuple(args, "O!O!OO!(OO)OO", &PyType_Type, &cls, &PyDict_Type, &languages, &other,
                          &PyDict_Type, &names, &json, &binary, &error, &fallback))
        return NULL;
    PyObject *slots = PyObject_GetAttrString(cls, "__slots__");
    if (slots == NULL) return NULL;
    Py_ssize_t n_slots = PyObject_Length(slots);
    Py_DECREF(slots);
    if (n_slots != N_FIELDS) /* a field added to the class would be left unset by the decoder */
        return PyErr_Format(PyExc_TypeError, "the command class has %zd slots, the codec fills %d", n_slots,
                            N_FIELDS);
    Py_ssize_t offsets[N_FIELDS];
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *descr = PyObject_GetAttrString(cls, FIELD_NAMES[f]);
        if (descr == NULL) return NULL;
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok) offsets[f] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!ok) return PyErr_Format(PyExc_TypeError, "%s is not a slot of the command class", FIELD_NAMES[f]);
    }
    memcpy(S.offset, offsets, sizeof offsets);
    S.serialize[0] = Py_NewRef(json);
    S.serialize[1] = Py_NewRef(binary);
    S.command = (PyTypeObject *)Py_NewRef(cls);
    S.languages = Py_NewRef(languages);
    S.other = Py_NewRef(other);
    S.names = Py_NewRef(names);
    S.error = Py_NewRef(error);
    S.fallback = Py_NewRef(fallback);
    if (S.empty == NULL && (S.empty = PyBytes_FromStringAndSize(NULL, 0)) == NULL) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"split", split, METH_VARARGS, split_doc},
    {"encode_parts", encode_parts, METH_O, encode_parts_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "remoting", NULL, -1, methods};

PyMODINIT_FUNC PyInit_remoting(void) { return PyModule_Create(&module); }
