/* HMAC-SHA1 of a remoting request (RocketMQ's request signature), on OpenSSL's SHA-1 itself.
 *
 * hashlib goes through OpenSSL's EVP layer: every copy and digest of a hash allocates a context
 * and walks the provider's code, which in a busy server (cold caches) costs several times the
 * hashing of a 1 KiB message. Here a Key holds the keyed inner and outer states as plain SHA_CTX
 * structs, made once per secret key and copied by value per request; the hashing is OpenSSL's
 * (with the CPU's SHA extensions). protocol/acl_signing.py's PySigningKey is the reference this
 * mirrors.
 *
 *   Key(secret: bytes)                   HMAC-SHA1 keyed with ``secret``
 *   Key.mac(content, body) -> bytes      HMAC-SHA1(secret, content + body), 20 bytes
 *   Key.sign(ext_fields, body, version) -> str   a remoting request's base64 Signature, hashing
 *       the values in place (no sort of the keys in Python, no joined and encoded copy); a value
 *       that is not a str is printed with str(), as the reference does
 *   Key.verify(ext_fields, body, version) -> bool   whether ext_fields' own Signature is
 *       sign(...), compared in constant time; False when it has none
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA1_Init & co.: the low-level calls, without EVP */
#include <Python.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <string.h>

#define BLOCK 64
#define SIGNATURE_LENGTH 28 /* base64 of 20 bytes */
#define V4_9_3 399          /* MQVersion ordinal of 4.9.3: older peers leave _UNIQUE_KEY_QUERY out */

typedef struct {
    SHA_CTX inner, outer;
} Prepared;

typedef struct {
    PyObject_HEAD Prepared prepared;
} Key;

static PyObject *Key_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Py_buffer secret;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Key(secret: bytes)");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*:Key", &secret)) return NULL;
    unsigned char block[BLOCK] = {0}, pad[BLOCK];
    if (secret.len > BLOCK) {
        SHA1((const unsigned char *)secret.buf, (size_t)secret.len, block);
    } else {
        memcpy(block, secret.buf, (size_t)secret.len);
    }
    PyBuffer_Release(&secret);
    Key *self = (Key *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x36;
    SHA1_Init(&self->prepared.inner);
    SHA1_Update(&self->prepared.inner, pad, BLOCK);
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x5C;
    SHA1_Init(&self->prepared.outer);
    SHA1_Update(&self->prepared.outer, pad, BLOCK);
    OPENSSL_cleanse(block, BLOCK);
    OPENSSL_cleanse(pad, BLOCK);
    return (PyObject *)self;
}

static void Key_dealloc(Key *self) {
    OPENSSL_cleanse(&self->prepared, sizeof self->prepared);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Key_mac(Key *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "mac(content, body)");
        return NULL;
    }
    Py_buffer content, body;
    if (PyObject_GetBuffer(args[0], &content, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&content);
        return NULL;
    }
    Prepared state = self->prepared;
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1_Update(&state.inner, content.buf, (size_t)content.len);
    SHA1_Update(&state.inner, body.buf, (size_t)body.len);
    SHA1_Final(digest, &state.inner);
    SHA1_Update(&state.outer, digest, SHA_DIGEST_LENGTH);
    SHA1_Final(digest, &state.outer);
    PyBuffer_Release(&content);
    PyBuffer_Release(&body);
    return PyBytes_FromStringAndSize((const char *)digest, SHA_DIGEST_LENGTH);
}

typedef struct {
    PyObject *key, *value; /* owned: a value that is not a str is its str() */
} Field;

/* sorted()'s order of two str keys: by code point (ASCII ones, nearly all, compared in place) */
static int key_order(PyObject *a, PyObject *b) {
    if (!PyUnicode_IS_ASCII(a) || !PyUnicode_IS_ASCII(b)) return PyUnicode_Compare(a, b);
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    const unsigned char *da = PyUnicode_DATA(a), *db = PyUnicode_DATA(b);
    if (la > 0 && lb > 0 && da[0] != db[0]) return da[0] - db[0]; /* most keys differ at once */
    int order = memcmp(da, db, (size_t)(la < lb ? la : lb));
    return order != 0 ? order : (la > lb) - (la < lb);
}

static int is_key(PyObject *key, const char *name, Py_ssize_t length) {
    return PyUnicode_IS_ASCII(key) && PyUnicode_GET_LENGTH(key) == length &&
           memcmp(PyUnicode_DATA(key), name, (size_t)length) == 0;
}

#define IS_KEY(key, name) is_key(key, name, (Py_ssize_t)(sizeof name - 1))

/* The base64 Signature of a request (28 chars and a NUL into out); -1 with an error set.
 * args: ext_fields (a dict with str keys), body, version (an int). The values of every key but
 * Signature (and, from a peer before 4.9.3, _UNIQUE_KEY_QUERY), in the order of the sorted keys
 * (by code point, as sorted() orders str), then the body: AclUtils.combineRequestContent.
 * *given: the Signature the fields hold (borrowed; NULL when none). */
static int sign_into(const Prepared *prepared, PyObject *const *args, char out[32], PyObject **given) {
    PyObject *dict = args[0];
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "ext_fields: a dict of str to str");
        return -1;
    }
    long version = PyLong_AsLong(args[2]);
    if (version == -1 && PyErr_Occurred()) return -1;
    int old_peer = version <= V4_9_3;
    Field stack[32], *fields = stack;
    Py_ssize_t size = PyDict_GET_SIZE(dict), count = 0, pos = 0;
    if (size > 32 && (fields = PyMem_Malloc((size_t)size * sizeof(Field))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int result = -1;
    *given = NULL;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "an extField key that is not a str");
            goto done;
        }
        if (IS_KEY(key, "Signature")) {
            *given = value;
            continue;
        }
        if (old_peer && IS_KEY(key, "_UNIQUE_KEY_QUERY")) continue;
        /* insertion sort: a client sends its keys in the same, nearly sorted, order every time */
        Py_ssize_t at = count;
        while (at > 0 && key_order(fields[at - 1].key, key) > 0) {
            fields[at] = fields[at - 1];
            at--;
        }
        Py_INCREF(key);
        Py_INCREF(value);
        fields[at].key = key;
        fields[at].value = value;
        count++;
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* a value that is not a str yet: as Java would print it */
        if (!PyUnicode_Check(fields[i].value)) {
            PyObject *printed = PyObject_Str(fields[i].value);
            if (printed == NULL) goto done;
            Py_SETREF(fields[i].value, printed);
        }
    }
    Prepared state = *prepared;
    unsigned char joined[1024]; /* the values gathered into few SHA1_Update calls: each costs */
    size_t used = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t length;
        const char *utf8 = PyUnicode_AsUTF8AndSize(fields[i].value, &length);
        if (utf8 == NULL) goto done;
        if (used + (size_t)length > sizeof joined) {
            SHA1_Update(&state.inner, joined, used);
            used = 0;
        }
        if ((size_t)length > sizeof joined) {
            SHA1_Update(&state.inner, utf8, (size_t)length);
        } else {
            memcpy(joined + used, utf8, (size_t)length);
            used += (size_t)length;
        }
    }
    SHA1_Update(&state.inner, joined, used);
    Py_buffer body;
    if (PyObject_GetBuffer(args[1], &body, PyBUF_SIMPLE) < 0) goto done;
    SHA1_Update(&state.inner, body.buf, (size_t)body.len);
    PyBuffer_Release(&body);
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1_Final(digest, &state.inner);
    SHA1_Update(&state.outer, digest, SHA_DIGEST_LENGTH);
    SHA1_Final(digest, &state.outer);
    EVP_EncodeBlock((unsigned char *)out, digest, SHA_DIGEST_LENGTH);
    result = 0;
done:
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(fields[i].key);
        Py_DECREF(fields[i].value);
    }
    if (fields != stack) PyMem_Free(fields);
    return result;
}

static PyObject *Key_sign(Key *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sign(ext_fields, body, version)");
        return NULL;
    }
    char out[32];
    PyObject *given;
    if (sign_into(&self->prepared, args, out, &given) < 0) return NULL;
    PyObject *signed_ = PyUnicode_New(SIGNATURE_LENGTH, 127);
    if (signed_ != NULL) memcpy(PyUnicode_DATA(signed_), out, SIGNATURE_LENGTH);
    return signed_;
}

static PyObject *Key_verify(Key *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "verify(ext_fields, body, version)");
        return NULL;
    }
    char out[32];
    PyObject *given;
    if (sign_into(&self->prepared, args, out, &given) < 0) return NULL;
    /* none, not a str, not ASCII: not a base64 signature; and the length of one is no secret */
    if (given == NULL || !PyUnicode_Check(given) || !PyUnicode_IS_ASCII(given) ||
        PyUnicode_GET_LENGTH(given) != SIGNATURE_LENGTH)
        Py_RETURN_FALSE;
    return PyBool_FromLong(CRYPTO_memcmp(out, PyUnicode_DATA(given), SIGNATURE_LENGTH) == 0);
}

static PyMethodDef Key_methods[] = {
    {"mac", (PyCFunction)(void (*)(void))Key_mac, METH_FASTCALL, "HMAC-SHA1(secret, content + body)."},
    {"sign", (PyCFunction)(void (*)(void))Key_sign, METH_FASTCALL, "A request's base64 Signature."},
    {"verify", (PyCFunction)(void (*)(void))Key_verify, METH_FASTCALL,
     "Whether a request's own Signature is right."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KeyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferrymq._native.hmac.Key",
    .tp_basicsize = sizeof(Key),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HMAC-SHA1 keyed with one secret: its inner and outer states, made once.",
    .tp_new = Key_new,
    .tp_dealloc = (destructor)Key_dealloc,
    .tp_methods = Key_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hmac", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_hmac(void) {
    if (PyType_Ready(&KeyType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Key", (PyObject *)&KeyType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
