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

static PyMethodDef methods[] = {
    {"decode_block", (PyCFunction)(void (*)(void))decode_block, METH_FASTCALL | METH_KEYWORDS,
     decode_block_doc},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, configure_doc},
    {"walk_batch_headers", (PyCFunction)(void (*)(void))walk_batch_headers, METH_FASTCALL,
     walk_batch_headers_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tierlog.log._speedups",
    .m_doc = "C accelerators of tierlog.log.record.decode_block and "
             "tierlog.log.batch.walk_batch_headers (optional; see record.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module_def);
#ifdef Py_GIL_DISABLED
    /* decode_block only reads its bytes and builds new objects; configure runs at import. */
    if (m != NULL) {
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
    }
#endif
    return m;
}
