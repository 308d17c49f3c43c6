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
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA1_Init & co.: the low-level calls, without EVP */
#include <Python.h>
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

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_O, "The keyed inner and outer SHA-1 states of HMAC-SHA1 with this key."},
    {"mac", (PyCFunction)(void (*)(void))mac, METH_FASTCALL, "HMAC-SHA1(key, content + body)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hmac", NULL, -1, methods};

PyMODINIT_FUNC PyInit_hmac(void) { return PyModule_Create(&module); }
