/* HMAC-SHA1 of a remoting request (RocketMQ's request signature), on OpenSSL's SHA-1 itself.
 *
 * hashlib goes through OpenSSL's EVP layer: every copy and digest of a hash allocates a context
 * and walks the provider's code, which in a busy server (cold caches) costs several times the
 * hashing of a 1 KiB message. Here the keyed inner and outer states are plain SHA_CTX structs,
 * copied by value per request; the hashing is OpenSSL's (with the CPU's SHA extensions).
 * protocol/acl_signing.py's pad-copying HMAC is the reference this mirrors.
 *
 *   prepare(key: bytes) -> bytes            the keyed inner and outer states, for mac()
 *   mac(prepared, content, body) -> bytes   HMAC-SHA1(key, content + body), 20 bytes
 *   sign(prepared, ext_fields, body, old_peer) -> bytes   a remoting request's base64 Signature,
 *       hashing the values in place (no sort of the keys in Python, no joined and encoded copy);
 *       TypeError when a key or value is not a str (the caller prints it as Java would)
 *   verify(prepared, ext_fields, body, old_peer, given: str) -> bool   sign(...) == given, in
 *       constant time
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA1_Init & co.: the low-level calls, without EVP */
#include <Python.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <string.h>

#define BLOCK 64

typedef struct {
    SHA_CTX inner, outer;
} Prepared;

static PyObject *prepare(PyObject *self, PyObject *arg) {
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0) return NULL;
    unsigned char block[BLOCK] = {0}, pad[BLOCK];
    if (key.len > BLOCK) {
        SHA1((const unsigned char *)key.buf, (size_t)key.len, block);
    } else {
        memcpy(block, key.buf, (size_t)key.len);
    }
    PyBuffer_Release(&key);
    Prepared prepared;
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x36;
    SHA1_Init(&prepared.inner);
    SHA1_Update(&prepared.inner, pad, BLOCK);
    for (int i = 0; i < BLOCK; i++) pad[i] = block[i] ^ 0x5C;
    SHA1_Init(&prepared.outer);
    SHA1_Update(&prepared.outer, pad, BLOCK);
    return PyBytes_FromStringAndSize((const char *)&prepared, sizeof prepared);
}

static PyObject *mac(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "mac(prepared, content, body)");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != (Py_ssize_t)sizeof(Prepared)) {
        PyErr_SetString(PyExc_ValueError, "prepared: what prepare() returned");
        return NULL;
    }
    Py_buffer content, body;
    if (PyObject_GetBuffer(args[1], &content, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &body, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&content);
        return NULL;
    }
    Prepared state;
    memcpy(&state, PyBytes_AS_STRING(args[0]), sizeof state);
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
    PyObject *key, *value;
} Field;

/* sorted()'s order of two str keys: by code point (ASCII ones, nearly all, compared in place) */
static int key_order(PyObject *a, PyObject *b) {
    if (!PyUnicode_IS_ASCII(a) || !PyUnicode_IS_ASCII(b)) return PyUnicode_Compare(a, b);
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    int order = memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)(la < lb ? la : lb));
    return order != 0 ? order : (la > lb) - (la < lb);
}

static int is_key(PyObject *key, const char *name, Py_ssize_t length) {
    return PyUnicode_IS_ASCII(key) && PyUnicode_GET_LENGTH(key) == length &&
           memcmp(PyUnicode_DATA(key), name, (size_t)length) == 0;
}

#define IS_KEY(key, name) is_key(key, name, (Py_ssize_t)(sizeof name - 1))

/* The base64 Signature of a request (28 chars and a NUL into out); -1 with an error set.
 * args: prepared, ext_fields (dict of str to str), body, old_peer (a peer before 4.9.3 leaves
 * _UNIQUE_KEY_QUERY out). The values of every key but Signature, in the order of the sorted keys
 * (by code point, as sorted() orders str), then the body: AclUtils.combineRequestContent. */
static int sign_into(PyObject *const *args, char out[32]) {
    if (!PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != (Py_ssize_t)sizeof(Prepared)) {
        PyErr_SetString(PyExc_ValueError, "prepared: what prepare() returned");
        return -1;
    }
    if (!PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "ext_fields: a dict of str to str");
        return -1;
    }
    int old_peer = PyObject_IsTrue(args[3]);
    if (old_peer < 0) return -1;
    Field stack[32], *fields = stack;
    Py_ssize_t size = PyDict_GET_SIZE(args[1]), count = 0, pos = 0;
    if (size > 32 && (fields = PyMem_Malloc((size_t)size * sizeof(Field))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int result = -1;
    PyObject *key, *value;
    while (PyDict_Next(args[1], &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "an extField that is not a str");
            goto done;
        }
        if (IS_KEY(key, "Signature") || (old_peer && IS_KEY(key, "_UNIQUE_KEY_QUERY"))) continue;
        /* insertion sort: a client sends its keys in the same, nearly sorted, order every time */
        Py_ssize_t at = count++;
        while (at > 0 && key_order(fields[at - 1].key, key) > 0) {
            fields[at] = fields[at - 1];
            at--;
        }
        fields[at].key = key;
        fields[at].value = value;
    }
    Prepared state;
    memcpy(&state, PyBytes_AS_STRING(args[0]), sizeof state);
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
    if (PyObject_GetBuffer(args[2], &body, PyBUF_SIMPLE) < 0) goto done;
    SHA1_Update(&state.inner, body.buf, (size_t)body.len);
    PyBuffer_Release(&body);
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1_Final(digest, &state.inner);
    SHA1_Update(&state.outer, digest, SHA_DIGEST_LENGTH);
    SHA1_Final(digest, &state.outer);
    EVP_EncodeBlock((unsigned char *)out, digest, SHA_DIGEST_LENGTH);
    result = 0;
done:
    if (fields != stack) PyMem_Free(fields);
    return result;
}

#define SIGNATURE_LENGTH 28 /* base64 of 20 bytes */

static PyObject *sign(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "sign(prepared, ext_fields, body, old_peer)");
        return NULL;
    }
    char out[32];
    if (sign_into(args, out) < 0) return NULL;
    return PyBytes_FromStringAndSize(out, SIGNATURE_LENGTH);
}

static PyObject *verify(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "verify(prepared, ext_fields, body, old_peer, given)");
        return NULL;
    }
    PyObject *given = args[4];
    if (!PyUnicode_Check(given)) {
        PyErr_SetString(PyExc_TypeError, "given: a str");
        return NULL;
    }
    char out[32];
    if (sign_into(args, out) < 0) return NULL;
    /* not ASCII: not base64; and the length of a signature is no secret */
    if (!PyUnicode_IS_ASCII(given) || PyUnicode_GET_LENGTH(given) != SIGNATURE_LENGTH) Py_RETURN_FALSE;
    return PyBool_FromLong(CRYPTO_memcmp(out, PyUnicode_DATA(given), SIGNATURE_LENGTH) == 0);
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_O, "The keyed inner and outer SHA-1 states of HMAC-SHA1 with this key."},
    {"mac", (PyCFunction)(void (*)(void))mac, METH_FASTCALL, "HMAC-SHA1(key, content + body)."},
    {"sign", (PyCFunction)(void (*)(void))sign, METH_FASTCALL, "A request's base64 Signature."},
    {"verify", (PyCFunction)(void (*)(void))verify, METH_FASTCALL, "Whether a request's Signature is right."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hmac", NULL, -1, methods};

PyMODINIT_FUNC PyInit_hmac(void) { return PyModule_Create(&module); }
