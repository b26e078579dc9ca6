/*
 * tierlog.log._speedups: the C accelerator of tierlog.log.record.decode_block, and of
 * tierlog.log.batch.walk_batch_headers (the header walk of a remote read).
 *
 * Deep iteration spends nearly all its time turning records blocks into Record tuples; in pure
 * Python that is ~1.5 us a record however the loop is tuned, here it is a few hundred ns. This
 * module is optional: record.py keeps the pure-Python decoder (decode_block_pure), which is the
 * reference, and uses this one only when it imports (and TIERLOG_NO_SPEEDUPS is not set).
 *
 * Contract: for every input, the same result and the same BlockError (message and offset) as
 * decode_block_pure. Every read is bounds-checked the way the pure loop's indexing is: an
 * IndexError there ("record runs past the end...") is a failed check here, slices past the end
 * are cut, and the varints follow tierlog.log._varint (zigzag, at most 5 / 10 bytes, the bits
 * beyond 32 / 64 dropped). Inputs outside the fast path's types (not exactly bytes and ints that
 * fit in 64 bits, keyword arguments) are handed to the pure function, which then defines the
 * result, errors included.
 *
 * configure(Record, BlockError, decode_block_pure) must be called once before decode_block:
 * record.py does it right after importing this module, which avoids a circular import.
 *
 * key_digests (pass 1 of a compaction scan, tierlog.compaction.key_digests) walks a block with
 * decode_block's checks and errors but returns only the offsets and the MD5 digests of its keyed
 * records, without an object per record; its reference is key_digests_pure in that module.
 *
 * encode_records (building batches, compaction's rewrite above all) is in _speedups_encode.h,
 * included below: the twin of tierlog.log.record.encode_records_pure, which it hands any input
 * outside its plain case, rejected ones included, so that errors are always the pure ones.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyTypeObject *record_type;  /* tierlog.log.record.Record (a tuple subclass) */
static PyObject *block_error;      /* tierlog.log.record.BlockError */
static PyObject *fallback;         /* tierlog.log.record.decode_block_pure */

enum {
    OK = 0,
    E_PAST,          /* the pure loop's IndexError: the record runs past the block */
    E_VARINT_PAST,   /* _varint._decode: "varint runs past the end of its buffer" */
    E_VARINT_LONG,   /* _varint._decode: "varint is too long" */
    E_VARLONG_PAST,
    E_VARLONG_LONG,
};

/* The general varint (max_bytes 5) or varlong (10) at *pos, as _varint._decode reads it. */
static int
read_var(const unsigned char *p, int64_t end, int64_t *pos, int max_bytes, int64_t *out)
{
    int64_t at = *pos;
    uint64_t n = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (at >= end) {
            return max_bytes == 5 ? E_VARINT_PAST : E_VARLONG_PAST;
        }
        unsigned char b = p[at++];
        n |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            if (max_bytes == 5) {
                n &= 0xFFFFFFFFu;
            }
            *out = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
            *pos = at;
            return OK;
        }
    }
    return max_bytes == 5 ? E_VARINT_LONG : E_VARLONG_LONG;
}

/* A varint field at *pos. The pure loop indexes data[pos] first, and for a record's fixed fields
 * (two_byte_inline) also data[pos + 1] when the first byte continues, before the general
 * decoder: those reads past the block are E_PAST, not the decoder's own error. */
static inline int
read_field(const unsigned char *p, int64_t end, int64_t *pos, int max_bytes, int two_byte_inline,
           int64_t *out)
{
    int64_t at = *pos;
    if (at >= end) {
        return E_PAST;
    }
    unsigned char b = p[at];
    if (b < 0x80) {
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pos = at + 1;
        return OK;
    }
    if (two_byte_inline && at + 1 >= end) {
        return E_PAST;
    }
    return read_var(p, end, pos, max_bytes, out);
}

/* data[pos:pos + n] for 0 <= pos <= end, n >= 0: cut at the end of the block as Python cuts. */
static PyObject *
slice(const unsigned char *p, int64_t end, int64_t pos, int64_t n)
{
    int64_t take = n < end - pos ? n : end - pos;
    return PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)take);
}

/* a + b as a Python int; beyond int64 (a base near its limit) Python's arithmetic decides. */
static PyObject *
add(int64_t a, int64_t b)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {
        PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b), *r = NULL;
        if (x != NULL && y != NULL) {
            r = PyNumber_Add(x, y);
        }
        Py_XDECREF(x);
        Py_XDECREF(y);
        return r;
    }
    return PyLong_FromLongLong(a + b);
}

/* Raise BlockError(message, offset); from_none as the pure code's "raise ... from None". */
static void
raise_block_error(int from_none, int64_t offset, const char *format, ...)
{
    va_list va;
    va_start(va, format);
    PyObject *message = PyUnicode_FromFormatV(format, va);
    va_end(va);
    if (message == NULL) {
        return;
    }
    PyObject *exc = PyObject_CallFunction(block_error, "(NL)", message, (long long)offset);
    if (exc == NULL) {
        return;
    }
    if (from_none) {
        PyException_SetCause(exc, NULL);  /* also sets __suppress_context__ */
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

/* An exact int that fits in 64 bits, or 0 (the caller then hands over to the pure function). */
static int
as_int64(PyObject *o, int64_t *out)
{
    int overflow;
    if (!PyLong_CheckExact(o)) {
        return 0;
    }
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* Headers of one record from *pos (its count byte is not 0), as record._decode_headers. */
static PyObject *
decode_headers(const unsigned char *p, int64_t end, int64_t *pos_io, int64_t record_end,
               int *err, int64_t *err_at)
{
    int64_t pos = *pos_io, count, n;
    int64_t at = pos;
    int e = read_field(p, end, &pos, 5, 0, &count);
    if (e != OK) {
        *err = e;
        *err_at = at;
        return NULL;
    }
    if (count < 0 || count > record_end - pos) {
        raise_block_error(0, at, "invalid number of record headers %lld", (long long)count);
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (int64_t i = 0; i < count; i++) {
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 0, &n)) != OK) {
            goto varint_error;
        }
        if (n < 0) {
            raise_block_error(0, at, "invalid negative header key size %lld", (long long)n);
            goto error;
        }
        if (pos + n > record_end) {
            raise_block_error(0, at, "header key of %lld bytes runs past its record",
                              (long long)n);
            goto error;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)p + pos, (Py_ssize_t)n,
                                             "surrogateescape");
        if (key == NULL) {
            goto error;
        }
        pos += n;
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 0, &n)) != OK) {
            Py_DECREF(key);
            goto varint_error;
        }
        PyObject *value;
        if (n < 0) {
            value = Py_NewRef(Py_None);
        }
        else {
            value = slice(p, end, pos, n);
            pos += n;
        }
        PyObject *pair = value == NULL ? NULL : PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    *pos_io = pos;
    return headers;

varint_error:
    *err = e;
    *err_at = at;
error:
    Py_DECREF(headers);
    return NULL;
}

PyDoc_STRVAR(decode_block_doc,
"decode_block(data, count, base_offset, base_timestamp, log_append_time)\n"
"--\n\n"
"Decode count records filling exactly data (tierlog.log.record.decode_block_pure in C).");

static PyObject *
decode_block(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int64_t count, base_offset, base_timestamp;
    (void)module;
    if (fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tierlog.log._speedups is not configured");
        return NULL;
    }
    if (kwnames != NULL || nargs != 5 || !PyBytes_CheckExact(args[0])
        || !as_int64(args[1], &count) || !as_int64(args[2], &base_offset)
        || !as_int64(args[3], &base_timestamp)) {
        return PyObject_Vectorcall(fallback, args, (size_t)nargs, kwnames);
    }
    PyObject *log_append_time = args[4] == Py_None ? NULL : args[4];
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const int64_t end = PyBytes_GET_SIZE(args[0]);
    /* A record takes at least 7 bytes, so no more than end / 7 of them can be decoded. */
    int64_t cap = count < 0 ? 0 : (count < end / 7 ? count : end / 7);
    PyObject *out = PyList_New((Py_ssize_t)cap);
    if (out == NULL) {
        return NULL;
    }
    PyObject *key = NULL, *value = NULL, *headers = NULL;
    int64_t pos = 0, start = 0, at = 0, i = 0, length, ts_delta, offset_delta, n;
    int e = OK;

    for (i = 0; i < count; i++) {
        start = at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &length)) != OK) {
            goto varint_error;
        }
        int64_t record_end = pos + length;
        if (length < 6 || length > end - pos) {
            raise_block_error(0, start,
                              "record length %lld is impossible (%lld bytes left in the block)",
                              (long long)length, (long long)(end - pos));
            goto error;
        }
        at = ++pos;  /* the attributes byte: no record attributes are defined */
        if ((e = read_field(p, end, &pos, 10, 1, &ts_delta)) != OK) {
            goto varint_error;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &offset_delta)) != OK) {
            goto varint_error;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &n)) != OK) {
            goto varint_error;
        }
        if (n < 0) {
            key = Py_NewRef(Py_None);
        }
        else if ((key = slice(p, end, pos, n)) == NULL) {
            goto error;
        }
        else {
            pos += n;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &n)) != OK) {
            goto varint_error;
        }
        if (n < 0) {
            value = Py_NewRef(Py_None);
        }
        else if ((value = slice(p, end, pos, n)) == NULL) {
            goto error;
        }
        else {
            pos += n;
        }
        if (pos >= end) {
            e = E_PAST;
            goto varint_error;
        }
        if (p[pos] == 0) {
            headers = PyTuple_New(0);
            pos++;
        }
        else {
            e = OK;
            headers = decode_headers(p, end, &pos, record_end, &e, &at);
        }
        if (headers == NULL) {
            if (e != OK) {
                goto varint_error;
            }
            goto error;
        }
        if (pos != record_end) {
            raise_block_error(0, start, "record body is %lld bytes but fields take %lld",
                              (long long)length, (long long)(pos - record_end + length));
            goto error;
        }
        PyObject *offset = add(base_offset, offset_delta);
        PyObject *timestamp = log_append_time == NULL ? add(base_timestamp, ts_delta)
                                                      : Py_NewRef(log_append_time);
        PyObject *od = PyLong_FromLongLong(offset_delta);
        PyObject *td = PyLong_FromLongLong(ts_delta);
        PyObject *record = NULL;
        if (offset != NULL && timestamp != NULL && od != NULL && td != NULL) {
            record = record_type->tp_alloc(record_type, 7);
        }
        if (record == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(timestamp);
            Py_XDECREF(od);
            Py_XDECREF(td);
            goto error;
        }
#if PY_VERSION_HEX >= 0x030E0000
        ((PyTupleObject *)record)->ob_hash = -1;  /* 3.14 caches a tuple's hash; none yet */
#endif
        PyTuple_SET_ITEM(record, 0, offset);
        PyTuple_SET_ITEM(record, 1, timestamp);
        PyTuple_SET_ITEM(record, 2, key);
        PyTuple_SET_ITEM(record, 3, value);
        PyTuple_SET_ITEM(record, 4, headers);
        PyTuple_SET_ITEM(record, 5, od);
        PyTuple_SET_ITEM(record, 6, td);
        key = value = headers = NULL;
        if (i >= cap) {  /* cannot happen: a record takes 7 bytes or more (see cap) */
            Py_DECREF(record);
            PyErr_SetString(PyExc_SystemError, "decode_block: more records than bytes allow");
            goto error;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, record);
    }
    if (pos != end) {
        raise_block_error(0, pos, "%lld bytes remain after the %lld records the batch declares",
                          (long long)(end - pos), (long long)count);
        goto error;
    }
    return out;

varint_error:
    switch (e) {
    case E_PAST:
        if (start >= end) {
            raise_block_error(1, start,
                              "the batch declares %lld records but its records block holds %lld",
                              (long long)count, (long long)i);
        }
        else {
            raise_block_error(1, start, "record runs past the end of its records block");
        }
        break;
    case E_VARINT_PAST:
    case E_VARLONG_PAST:
        raise_block_error(1, at, "%s runs past the end of its buffer (%lld bytes) in record",
                          e == E_VARINT_PAST ? "varint" : "varlong", (long long)end);
        break;
    default:
        raise_block_error(1, at,
                          "%s is too long (the continuation bit is set in its byte %d) in record",
                          e == E_VARINT_LONG ? "varint" : "varlong", e == E_VARINT_LONG ? 5 : 10);
        break;
    }
error:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(headers);
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(configure_doc,
"configure(record_type, block_error, fallback)\n"
"--\n\n"
"Give the module the Record class it builds, the BlockError it raises and the pure decoder\n"
"it hands unusual arguments to (tierlog.log.record does this once, at import).");

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "configure() takes 3 arguments");
        return NULL;
    }
    PyObject *type = args[0];
    /* Records are filled in place: the class must be a tuple subclass adding no fields (a
     * NamedTuple, whose __slots__ is empty). */
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
        || ((PyTypeObject *)type)->tp_basicsize != PyTuple_Type.tp_basicsize
        || ((PyTypeObject *)type)->tp_itemsize != PyTuple_Type.tp_itemsize
        || ((PyTypeObject *)type)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a NamedTuple class");
        return NULL;
    }
    PyObject *fields = PyObject_GetAttrString(type, "_fields");
    Py_ssize_t n_fields = fields != NULL && PyTuple_Check(fields) ? PyTuple_GET_SIZE(fields) : -1;
    Py_XDECREF(fields);
    if (n_fields != 7) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "record_type must have the 7 fields of Record: "
                                         "update _speedups.c along with record.py");
        return NULL;
    }
    if (!PyExceptionClass_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "block_error must be an exception class "
                                         "and fallback a callable");
        return NULL;
    }
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(block_error, Py_NewRef(args[1]));
    Py_XSETREF(fallback, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

PyDoc_STRVAR(walk_batch_headers_doc,
"walk_batch_headers(buf, min_length, magic)\n"
"--\n\n"
"Follow the Length fields of the v2 batches packed in buf from position 0: (position, status,\n"
"last) where the walk stopped, its reason and where the last whole batch before it starts (-1:\n"
"none); status 0: fewer than 17 bytes are left there, 1: the batch there runs past the end, 2:\n"
"its Length is below min_length or its magic is not magic. The C twin of\n"
"tierlog.log.batch.walk_batch_headers_pure.");

static PyObject *
walk_batch_headers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "walk_batch_headers() takes 3 arguments");
        return NULL;
    }
    long long min_length = PyLong_AsLongLong(args[1]);
    if (min_length == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long magic = PyLong_AsLong(args[2]);
    if (magic == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    int64_t end = (int64_t)view.len;
    int64_t pos = 0;
    int64_t last = -1;
    int status = 0;
    /* The GIL stays held: buf may be a bytearray that another thread could resize. */
    while (pos + 17 <= end) {
        const unsigned char *h = p + pos + 8;
        int32_t length = (int32_t)(((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16)
                                   | ((uint32_t)h[2] << 8) | (uint32_t)h[3]);
        int64_t next = pos + 12 + (int64_t)length;
        if (next > end) {
            status = 1;
            break;
        }
        if ((long long)length < min_length || (long)(signed char)p[pos + 16] != magic) {
            status = 2;
            break;
        }
        last = pos;
        pos = next;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(LiL)", (long long)pos, status, (long long)last);
}

/* --- key_digests: pass 1 of a compaction scan ----------------------------------------------
 *
 * Kafka's SkimpyOffsetMap knows a key by the MD5 digest of its bytes. The compaction scan
 * needs, per batch, the offset and the digest of every keyed record: key_digests walks a
 * records block the way decode_block does (same checks, same BlockError for every defect) but
 * builds no object per record: offsets and digests are written into two preallocated bytes
 * objects. MD5 is implemented here (RFC 1321) so that the build needs nothing beyond Python's
 * headers; tests/compaction/test_key_digests.py checks it against hashlib. */

#define MD5_ROTL(x, s) (((x) << (s)) | ((x) >> (32 - (s))))
#define MD5_F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define MD5_G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))

/* The 64 steps of RFC 1321, section 3.4, as S(function, a, b, c, d, word, constant, shift):
 * 4 rounds of 16, each constant the integer part of 2^32 * |sin(i + 1)|, words and shifts as
 * the RFC orders them. One list serves the single and the 4-lane block functions. */
#define MD5_STEPS(S) \
    S(F, a, b, c, d,  0, 0xd76aa478u,  7) \
    S(F, d, a, b, c,  1, 0xe8c7b756u, 12) \
    S(F, c, d, a, b,  2, 0x242070dbu, 17) \
    S(F, b, c, d, a,  3, 0xc1bdceeeu, 22) \
    S(F, a, b, c, d,  4, 0xf57c0fafu,  7) \
    S(F, d, a, b, c,  5, 0x4787c62au, 12) \
    S(F, c, d, a, b,  6, 0xa8304613u, 17) \
    S(F, b, c, d, a,  7, 0xfd469501u, 22) \
    S(F, a, b, c, d,  8, 0x698098d8u,  7) \
    S(F, d, a, b, c,  9, 0x8b44f7afu, 12) \
    S(F, c, d, a, b, 10, 0xffff5bb1u, 17) \
    S(F, b, c, d, a, 11, 0x895cd7beu, 22) \
    S(F, a, b, c, d, 12, 0x6b901122u,  7) \
    S(F, d, a, b, c, 13, 0xfd987193u, 12) \
    S(F, c, d, a, b, 14, 0xa679438eu, 17) \
    S(F, b, c, d, a, 15, 0x49b40821u, 22) \
    S(G, a, b, c, d,  1, 0xf61e2562u,  5) \
    S(G, d, a, b, c,  6, 0xc040b340u,  9) \
    S(G, c, d, a, b, 11, 0x265e5a51u, 14) \
    S(G, b, c, d, a,  0, 0xe9b6c7aau, 20) \
    S(G, a, b, c, d,  5, 0xd62f105du,  5) \
    S(G, d, a, b, c, 10, 0x02441453u,  9) \
    S(G, c, d, a, b, 15, 0xd8a1e681u, 14) \
    S(G, b, c, d, a,  4, 0xe7d3fbc8u, 20) \
    S(G, a, b, c, d,  9, 0x21e1cde6u,  5) \
    S(G, d, a, b, c, 14, 0xc33707d6u,  9) \
    S(G, c, d, a, b,  3, 0xf4d50d87u, 14) \
    S(G, b, c, d, a,  8, 0x455a14edu, 20) \
    S(G, a, b, c, d, 13, 0xa9e3e905u,  5) \
    S(G, d, a, b, c,  2, 0xfcefa3f8u,  9) \
    S(G, c, d, a, b,  7, 0x676f02d9u, 14) \
    S(G, b, c, d, a, 12, 0x8d2a4c8au, 20) \
    S(H, a, b, c, d,  5, 0xfffa3942u,  4) \
    S(H, d, a, b, c,  8, 0x8771f681u, 11) \
    S(H, c, d, a, b, 11, 0x6d9d6122u, 16) \
    S(H, b, c, d, a, 14, 0xfde5380cu, 23) \
    S(H, a, b, c, d,  1, 0xa4beea44u,  4) \
    S(H, d, a, b, c,  4, 0x4bdecfa9u, 11) \
    S(H, c, d, a, b,  7, 0xf6bb4b60u, 16) \
    S(H, b, c, d, a, 10, 0xbebfbc70u, 23) \
    S(H, a, b, c, d, 13, 0x289b7ec6u,  4) \
    S(H, d, a, b, c,  0, 0xeaa127fau, 11) \
    S(H, c, d, a, b,  3, 0xd4ef3085u, 16) \
    S(H, b, c, d, a,  6, 0x04881d05u, 23) \
    S(H, a, b, c, d,  9, 0xd9d4d039u,  4) \
    S(H, d, a, b, c, 12, 0xe6db99e5u, 11) \
    S(H, c, d, a, b, 15, 0x1fa27cf8u, 16) \
    S(H, b, c, d, a,  2, 0xc4ac5665u, 23) \
    S(I, a, b, c, d,  0, 0xf4292244u,  6) \
    S(I, d, a, b, c,  7, 0x432aff97u, 10) \
    S(I, c, d, a, b, 14, 0xab9423a7u, 15) \
    S(I, b, c, d, a,  5, 0xfc93a039u, 21) \
    S(I, a, b, c, d, 12, 0x655b59c3u,  6) \
    S(I, d, a, b, c,  3, 0x8f0ccc92u, 10) \
    S(I, c, d, a, b, 10, 0xffeff47du, 15) \
    S(I, b, c, d, a,  1, 0x85845dd1u, 21) \
    S(I, a, b, c, d,  8, 0x6fa87e4fu,  6) \
    S(I, d, a, b, c, 15, 0xfe2ce6e0u, 10) \
    S(I, c, d, a, b,  6, 0xa3014314u, 15) \
    S(I, b, c, d, a, 13, 0x4e0811a1u, 21) \
    S(I, a, b, c, d,  4, 0xf7537e82u,  6) \
    S(I, d, a, b, c, 11, 0xbd3af235u, 10) \
    S(I, c, d, a, b,  2, 0x2ad7d2bbu, 15) \
    S(I, b, c, d, a,  9, 0xeb86d391u, 21)

static inline uint32_t
load_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
           | ((uint32_t)p[3] << 24);
}

static inline void
store_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* One 64-byte block into the state (words are little-endian whatever the host). */
static void
md5_block(uint32_t state[4], const unsigned char *p)
{
    uint32_t x[16];
    for (int i = 0; i < 16; i++) {
        x[i] = load_le32(p + 4 * i);
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
#define S1(f, a, b, c, d, k, t, s)                           \
    (a) += MD5_##f((b), (c), (d)) + x[k] + (t);              \
    (a) = MD5_ROTL((a), (s)) + (b);
    MD5_STEPS(S1)
#undef S1
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
}

#define MD5_LANES 4

/* The digests of MD5_LANES messages of one block each (already padded), in lockstep: one MD5
 * is a chain of dependent additions and rotations that leaves most of a core idle, and
 * independent lanes fill it (the compiler interleaves, or vectorises, the lane loops). */
static void
md5_blocks_lanes(const unsigned char blocks[MD5_LANES][64], unsigned char *const out[MD5_LANES])
{
    uint32_t x[16][MD5_LANES];
    for (int i = 0; i < 16; i++) {
        for (int l = 0; l < MD5_LANES; l++) {
            x[i][l] = load_le32(blocks[l] + 4 * i);
        }
    }
    uint32_t a[MD5_LANES], b[MD5_LANES], c[MD5_LANES], d[MD5_LANES];
    for (int l = 0; l < MD5_LANES; l++) {
        a[l] = 0x67452301u;
        b[l] = 0xefcdab89u;
        c[l] = 0x98badcfeu;
        d[l] = 0x10325476u;
    }
#define S4(f, a, b, c, d, k, t, s)                                  \
    for (int l = 0; l < MD5_LANES; l++) {                            \
        (a)[l] += MD5_##f((b)[l], (c)[l], (d)[l]) + x[k][l] + (t);  \
        (a)[l] = MD5_ROTL((a)[l], (s)) + (b)[l];                    \
    }
    MD5_STEPS(S4)
#undef S4
    for (int l = 0; l < MD5_LANES; l++) {
        store_le32(out[l], a[l] + 0x67452301u);
        store_le32(out[l] + 4, b[l] + 0xefcdab89u);
        store_le32(out[l] + 8, c[l] + 0x98badcfeu);
        store_le32(out[l] + 12, d[l] + 0x10325476u);
    }
}

/* The last block of a message of n <= 55 bytes: its bytes, 0x80, zeros, its length in bits. */
static inline void
md5_pad_short(unsigned char block[64], const unsigned char *data, size_t n)
{
    memcpy(block, data, n);
    block[n] = 0x80;
    memset(block + n + 1, 0, 55 - n);
    uint64_t bits = (uint64_t)n << 3;
    for (int i = 0; i < 8; i++) {
        block[56 + i] = (unsigned char)(bits >> (8 * i));
    }
}

/* Digests of short keys (55 bytes or fewer: one block) wait here until MD5_LANES of them can be
 * computed together; each knows where its digest goes. */
typedef struct {
    unsigned char blocks[MD5_LANES][64];
    unsigned char *out[MD5_LANES];
    int pending;
} md5_lanes;

static void
md5_lanes_flush(md5_lanes *lanes)
{
    if (lanes->pending == MD5_LANES) {
        md5_blocks_lanes((const unsigned char (*)[64])lanes->blocks, lanes->out);
    }
    else {
        for (int l = 0; l < lanes->pending; l++) {
            uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
            md5_block(state, lanes->blocks[l]);
            for (int i = 0; i < 4; i++) {
                store_le32(lanes->out[l] + 4 * i, state[i]);
            }
        }
    }
    lanes->pending = 0;
}

/* The 16-byte MD5 digest of data[0:n] into out. The whole blocks are read in place; the tail,
 * the 0x80 byte, the zero padding and the length in bits (64-bit little-endian) take one or two
 * more blocks (two when 56 or more bytes are left over). */
static void
md5_digest(const unsigned char *data, size_t n, unsigned char out[16])
{
    uint32_t state[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    size_t whole = n & ~(size_t)63;
    for (size_t at = 0; at < whole; at += 64) {
        md5_block(state, data + at);
    }
    unsigned char tail[128];
    size_t rest = n - whole;
    size_t tail_size = rest < 56 ? 64 : 128;
    memcpy(tail, data + whole, rest);
    tail[rest] = 0x80;
    memset(tail + rest + 1, 0, tail_size - rest - 1 - 8);
    uint64_t bits = (uint64_t)n << 3;
    for (int i = 0; i < 8; i++) {
        tail[tail_size - 8 + i] = (unsigned char)(bits >> (8 * i));
    }
    md5_block(state, tail);
    if (tail_size == 128) {
        md5_block(state, tail + 64);
    }
    for (int i = 0; i < 4; i++) {
        store_le32(out + 4 * i, state[i]);
    }
}

/* The digest of a key into out: now for a long key, with the next MD5_LANES - 1 short ones
 * for a short key (md5_lanes_flush computes what is still pending). */
static inline void
md5_key(md5_lanes *lanes, const unsigned char *key, size_t n, unsigned char *out)
{
    if (n > 55) {
        md5_digest(key, n, out);
        return;
    }
    md5_pad_short(lanes->blocks[lanes->pending], key, n);
    lanes->out[lanes->pending] = out;
    if (++lanes->pending == MD5_LANES) {
        md5_lanes_flush(lanes);
    }
}

enum { E_RAISED = -1 };  /* skip_headers raised its own BlockError */

/* Skip the headers of one record from *pos_io (its count byte is not 0) with decode_headers'
 * checks and errors, building nothing (header keys decode with surrogateescape, which cannot
 * fail). Returns OK, E_RAISED, or a varint error code with *err_at set. */
static int
skip_headers(const unsigned char *p, int64_t end, int64_t *pos_io, int64_t record_end,
             int64_t *err_at)
{
    int64_t pos = *pos_io, count, n;
    int64_t at = pos;
    int e = read_field(p, end, &pos, 5, 0, &count);
    if (e != OK) {
        *err_at = at;
        return e;
    }
    if (count < 0 || count > record_end - pos) {
        raise_block_error(0, at, "invalid number of record headers %lld", (long long)count);
        return E_RAISED;
    }
    for (int64_t i = 0; i < count; i++) {
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 0, &n)) != OK) {
            *err_at = at;
            return e;
        }
        if (n < 0) {
            raise_block_error(0, at, "invalid negative header key size %lld", (long long)n);
            return E_RAISED;
        }
        if (pos + n > record_end) {
            raise_block_error(0, at, "header key of %lld bytes runs past its record",
                              (long long)n);
            return E_RAISED;
        }
        pos += n;
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 0, &n)) != OK) {
            *err_at = at;
            return e;
        }
        if (n >= 0) {
            pos += n;
        }
    }
    *pos_io = pos;
    return OK;
}

/* The BlockError of a failed read, worded as decode_block words it (see its varint_error). */
static void
raise_read_error(int e, int64_t start, int64_t at, int64_t end, int64_t count, int64_t decoded)
{
    switch (e) {
    case E_PAST:
        if (start >= end) {
            raise_block_error(1, start,
                              "the batch declares %lld records but its records block holds %lld",
                              (long long)count, (long long)decoded);
        }
        else {
            raise_block_error(1, start, "record runs past the end of its records block");
        }
        break;
    case E_VARINT_PAST:
    case E_VARLONG_PAST:
        raise_block_error(1, at, "%s runs past the end of its buffer (%lld bytes) in record",
                          e == E_VARINT_PAST ? "varint" : "varlong", (long long)end);
        break;
    default:
        raise_block_error(1, at,
                          "%s is too long (the continuation bit is set in its byte %d) in record",
                          e == E_VARINT_LONG ? "varint" : "varlong", e == E_VARINT_LONG ? 5 : 10);
        break;
    }
}

/* Whether the offset base + delta, which does not fit in 64 bits, is below end_offset: Python's
 * comparison decides (1, 0, or -1 with an exception set). */
static int
big_offset_below(int64_t base, int64_t delta, PyObject *end_offset, PyObject **offset_out)
{
    PyObject *offset = add(base, delta);
    if (offset == NULL) {
        return -1;
    }
    int below = PyObject_RichCompareBool(offset, end_offset, Py_LT);
    if (below == 1) {
        *offset_out = offset;
    }
    else {
        Py_DECREF(offset);
    }
    return below;
}

PyDoc_STRVAR(key_digests_doc,
"key_digests(block, count, base_offset, end_offset)\n"
"--\n\n"
"Walk the count records of a decompressed records block (any contiguous buffer) as\n"
"decode_block does and return (offsets, digests, decoded): for every record with a key (an\n"
"empty key is one) and an offset below end_offset, its offset as a little-endian int64 and\n"
"the 16-byte MD5 of its key, and the number of records walked. A corrupt block raises\n"
"decode_block's BlockError; a selected offset beyond int64 raises BlockError at offset 0.\n"
"The C twin of tierlog.compaction.key_digests.key_digests_pure.");

static PyObject *
key_digests(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (block_error == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tierlog.log._speedups is not configured");
        return NULL;
    }
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "key_digests() takes 4 arguments");
        return NULL;
    }
    if (!PyLong_Check(args[1]) || !PyLong_Check(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "key_digests(): count, base_offset and end_offset "
                                         "must be ints");
        return NULL;
    }
    long long count_ll = PyLong_AsLongLong(args[1]);
    if (count_ll == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long base_ll = PyLong_AsLongLong(args[2]);
    if (base_ll == -1 && PyErr_Occurred()) {
        return NULL;
    }
    /* end_offset is any int: one beyond int64 keeps every offset that fits (or none). */
    int end_overflow;
    long long end_ll = PyLong_AsLongLongAndOverflow(args[3], &end_overflow);
    if (end_ll == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const int64_t count = count_ll, base_offset = base_ll, end_offset = end_ll;

    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    const int64_t end = (int64_t)view.len;
    /* A record takes at least 7 bytes, so no more than end / 7 of them can be selected. */
    const int64_t cap = count < 0 ? 0 : (count < end / 7 ? count : end / 7);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cap * 8));
    PyObject *digests = offsets == NULL ? NULL
                                        : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cap * 16));
    PyObject *big_offset = NULL;  /* the first selected offset beyond int64, raised at the end */
    int64_t big_index = 0;
    md5_lanes lanes;
    lanes.pending = 0;
    if (digests == NULL) {
        goto error;
    }
    unsigned char *out_offsets = (unsigned char *)PyBytes_AS_STRING(offsets);
    unsigned char *out_digests = (unsigned char *)PyBytes_AS_STRING(digests);
    int64_t pos = 0, start = 0, at = 0, i, selected = 0, length, ignored, offset_delta, n;
    int e = OK;

    for (i = 0; i < count; i++) {
        start = at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &length)) != OK) {
            goto read_error;
        }
        int64_t record_end = pos + length;
        if (length < 6 || length > end - pos) {
            raise_block_error(0, start,
                              "record length %lld is impossible (%lld bytes left in the block)",
                              (long long)length, (long long)(end - pos));
            goto error;
        }
        at = ++pos;  /* the attributes byte */
        if ((e = read_field(p, end, &pos, 10, 1, &ignored)) != OK) {  /* timestamp delta */
            goto read_error;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &offset_delta)) != OK) {
            goto read_error;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &n)) != OK) {
            goto read_error;
        }
        int64_t key_at = pos, key_size = n;  /* a negative size is a null key */
        if (n >= 0) {
            pos += n;
        }
        at = pos;
        if ((e = read_field(p, end, &pos, 5, 1, &n)) != OK) {  /* the value, skipped */
            goto read_error;
        }
        if (n >= 0) {
            pos += n;
        }
        if (pos >= end) {
            e = E_PAST;
            goto read_error;
        }
        if (p[pos] == 0) {
            pos++;
        }
        else if ((e = skip_headers(p, end, &pos, record_end, &at)) != OK) {
            if (e == E_RAISED) {
                goto error;
            }
            goto read_error;
        }
        if (pos != record_end) {
            raise_block_error(0, start, "record body is %lld bytes but fields take %lld",
                              (long long)length, (long long)(pos - record_end + length));
            goto error;
        }
        if (key_size < 0) {
            continue;
        }
        /* The key lies within the record: pos == record_end <= end. */
        int fits = !((offset_delta > 0 && base_offset > INT64_MAX - offset_delta)
                     || (offset_delta < 0 && base_offset < INT64_MIN - offset_delta));
        int64_t offset = fits ? base_offset + offset_delta : 0;
        if (fits) {
            if (end_overflow < 0 || (end_overflow == 0 && offset >= end_offset)) {
                continue;
            }
        }
        else {
            PyObject *found = NULL;
            int below = big_offset_below(base_offset, offset_delta, args[3], &found);
            if (below < 0) {
                goto error;
            }
            if (below == 1 && big_offset == NULL) {
                big_offset = found;
                big_index = i;
            }
            else if (below == 1) {
                Py_DECREF(found);
            }
            continue;
        }
        if (selected >= cap) {  /* cannot happen: a record takes 7 bytes or more (see cap) */
            PyErr_SetString(PyExc_SystemError, "key_digests: more records than bytes allow");
            goto error;
        }
        uint64_t u = (uint64_t)offset;
        unsigned char *o = out_offsets + 8 * selected;
        for (int k = 0; k < 8; k++) {
            o[k] = (unsigned char)(u >> (8 * k));
        }
        md5_key(&lanes, p + key_at, (size_t)key_size, out_digests + 16 * selected);
        selected++;
    }
    if (pos != end) {
        raise_block_error(0, pos, "%lld bytes remain after the %lld records the batch declares",
                          (long long)(end - pos), (long long)count);
        goto error;
    }
    md5_lanes_flush(&lanes);
    if (big_offset != NULL) {
        raise_block_error(0, 0, "record %lld has the offset %S, beyond the int64 range",
                          (long long)big_index, big_offset);
        goto error;
    }
    PyBuffer_Release(&view);
    if (selected < cap && (_PyBytes_Resize(&offsets, (Py_ssize_t)(selected * 8)) != 0
                           || _PyBytes_Resize(&digests, (Py_ssize_t)(selected * 16)) != 0)) {
        Py_XDECREF(offsets);  /* _PyBytes_Resize cleared the one it failed on */
        Py_XDECREF(digests);
        return NULL;
    }
    return Py_BuildValue("(NNL)", offsets, digests, (long long)i);

read_error:
    raise_read_error(e, start, at, end, count, i);
error:
    Py_XDECREF(big_offset);
    Py_XDECREF(offsets);
    Py_XDECREF(digests);
    PyBuffer_Release(&view);
    return NULL;
}

#include "_speedups_encode.h"

static PyMethodDef methods[] = {
    {"decode_block", (PyCFunction)(void (*)(void))decode_block, METH_FASTCALL | METH_KEYWORDS,
     decode_block_doc},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, configure_doc},
    {"walk_batch_headers", (PyCFunction)(void (*)(void))walk_batch_headers, METH_FASTCALL,
     walk_batch_headers_doc},
    {"key_digests", (PyCFunction)(void (*)(void))key_digests, METH_FASTCALL, key_digests_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records,
     METH_FASTCALL | METH_KEYWORDS, encode_records_doc},
    {"configure_encode", (PyCFunction)(void (*)(void))configure_encode, METH_FASTCALL,
     configure_encode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tierlog.log._speedups",
    .m_doc = "C accelerators of tierlog.log.record.decode_block, "
             "tierlog.log.record.encode_records, tierlog.log.batch.walk_batch_headers and "
             "tierlog.compaction.key_digests (optional; see record.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module_def);
#ifdef Py_GIL_DISABLED
    /* decode_block only reads its bytes and builds new objects, encode_records reads a list of
     * records inside the list's critical section; configure runs at import. */
    if (m != NULL) {
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
    }
#endif
    return m;
}
