/*
 * encode_records in C: the twin of tierlog.log.record.encode_records_pure, #included by
 * _speedups.c (it uses that file's record_type and as_int64).
 *
 * Why: rewriting a segment (compaction pass 2) re-encodes every record it keeps, and the pure
 * encoder spends ~9 us a record there, mostly building varlongs in Python: a batch that keeps a
 * tombstone has the delete horizon as its base timestamp, so every timestamp delta is large.
 *
 * Contract: for every input, the bytes and the tuple encode_records_pure returns, or the error it
 * raises. The C code takes only the plain case: arguments by position, ints that fit in 64 bits,
 * records of exactly the configured Record class whose offset and timestamp are exact ints,
 * whose key and value are None or exact bytes, whose headers are an exact tuple or list of exact
 * (str, bytes | None) tuples, and everything within the limits the pure code checks. Anything
 * else (a condition the pure code rejects included) is handed to encode_records_pure on the same
 * input, so its result, or its exception type and message, is the answer: this file never
 * words an error of its own. A list or tuple of records is read in place; any other iterable is
 * consumed one item at a time and, when it has to be handed over, the pure function gets
 * itertools.chain(the items already taken, the rest of the iterator): it sees the very sequence
 * of items it would have, and the iterator is left where the pure function leaves it.
 *
 * configure_encode(encode_records_pure) must be called (after configure) before encode_records:
 * record.py does it at import.
 */

static PyObject *encode_fallback;  /* tierlog.log.record.encode_records_pure */
static PyObject *chain_type;       /* itertools.chain */

/* The zigzag forms of a varint (32-bit) and a varlong (64-bit); >> of a negative is arithmetic
 * on every compiler CPython supports. */
static inline uint64_t
zigzag32(int64_t v)
{
    return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)((int32_t)v >> 31));
}

static inline uint64_t
zigzag64(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline Py_ssize_t
uleb_size(uint64_t u)
{
    Py_ssize_t n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *
put_uleb(unsigned char *p, uint64_t u)
{
    while (u > 0x7F) {
        *p++ = (unsigned char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (unsigned char)u;
    return p;
}

/* a - b into *out, or 0 if it leaves int64 (Python's ints would not: the pure code decides). */
static inline int
sub_int64(int64_t a, int64_t b, int64_t *out)
{
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) {
        return 0;
    }
    *out = a - b;
    return 1;
}

enum {
    ENC_OK = 0,
    ENC_UNUSUAL,  /* outside the plain case: hand the whole input to encode_records_pure */
    ENC_ERROR,    /* a Python error is set (memory) */
};

/* The block being built: one bytes object grown by doubling, cut to size at the end. */
typedef struct {
    PyObject *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int64_t base_offset, base_timestamp;
    int64_t prev_delta, max_ts;
    Py_ssize_t count;
} encoder;

static int
reserve(encoder *enc, Py_ssize_t more)
{
    if (more <= enc->cap - enc->len) {
        return ENC_OK;
    }
    if (more > PY_SSIZE_T_MAX / 2 - enc->len) {
        return ENC_UNUSUAL;  /* beyond any bytes object; the pure code says what fails */
    }
    Py_ssize_t cap = enc->cap * 2 > enc->len + more ? enc->cap * 2 : enc->len + more;
    if (cap < 4096) {
        cap = 4096;
    }
    if (enc->buf == NULL) {
        enc->buf = PyBytes_FromStringAndSize(NULL, cap);
        if (enc->buf == NULL) {
            return ENC_ERROR;
        }
    }
    else if (_PyBytes_Resize(&enc->buf, cap) != 0) {
        return ENC_ERROR;  /* _PyBytes_Resize freed the buffer and set enc->buf to NULL */
    }
    enc->cap = cap;
    return ENC_OK;
}

/* A nullable key or value: its length into *n (-1 for None), 0 if it is neither None nor an
 * exact bytes object of a length a varint holds. */
static inline int
nullable_bytes(PyObject *o, Py_ssize_t *n)
{
    if (o == Py_None) {
        *n = -1;
        return 1;
    }
    if (!PyBytes_CheckExact(o) || PyBytes_GET_SIZE(o) > INT32_MAX) {
        return 0;
    }
    *n = PyBytes_GET_SIZE(o);
    return 1;
}

/* A header key as UTF-8 with surrogateescape: an ASCII str is its own encoding (*encoded stays
 * NULL); any other str is encoded into *encoded (a new reference). ENC_UNUSUAL if the key is not
 * an exact str, cannot be encoded (a surrogate outside U+DC80..U+DCFF) or is too long. */
static int
header_key(PyObject *key, const char **data, Py_ssize_t *n, PyObject **encoded)
{
    *encoded = NULL;
    if (!PyUnicode_CheckExact(key)) {
        return ENC_UNUSUAL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(key) < 0) {
        return ENC_ERROR;
    }
#endif
    if (PyUnicode_IS_ASCII(key)) {
        *data = (const char *)PyUnicode_DATA(key);
        *n = PyUnicode_GET_LENGTH(key);
    }
    else {
        *encoded = PyUnicode_AsEncodedString(key, "utf-8", "surrogateescape");
        if (*encoded == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                return ENC_ERROR;
            }
            PyErr_Clear();
            return ENC_UNUSUAL;
        }
        *data = PyBytes_AS_STRING(*encoded);
        *n = PyBytes_GET_SIZE(*encoded);
    }
    if (*n > INT32_MAX) {
        Py_CLEAR(*encoded);
        return ENC_UNUSUAL;
    }
    return ENC_OK;
}

/* A header of the plain case: an exact 2-tuple of a str key and a nullable bytes value. */
static inline int
header_parts(PyObject *h, PyObject **key, PyObject **value, Py_ssize_t *value_len)
{
    if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2) {
        return 0;
    }
    *key = PyTuple_GET_ITEM(h, 0);
    *value = PyTuple_GET_ITEM(h, 1);
    return nullable_bytes(*value, value_len);
}

/* Append one record to the block, as the body of the pure loop does. The record's size is
 * worked out first (its length prefix comes before it), then it is written in place. */
static int
encode_one(encoder *enc, PyObject *r)
{
    int64_t offset, ts, offset_delta, ts_delta;
    Py_ssize_t key_len, value_len, n_headers = 0;
    PyObject *headers, *const *hs = NULL;

    if (Py_TYPE(r) != record_type || PyTuple_GET_SIZE(r) < 5
        || !as_int64(PyTuple_GET_ITEM(r, 0), &offset) || !as_int64(PyTuple_GET_ITEM(r, 1), &ts)
        || !sub_int64(offset, enc->base_offset, &offset_delta)
        || offset_delta <= enc->prev_delta || offset_delta > INT32_MAX
        || (ts < 0 && ts != -1) || !sub_int64(ts, enc->base_timestamp, &ts_delta)) {
        return ENC_UNUSUAL;
    }
    PyObject *key = PyTuple_GET_ITEM(r, 2), *value = PyTuple_GET_ITEM(r, 3);
    if (!nullable_bytes(key, &key_len) || !nullable_bytes(value, &value_len)) {
        return ENC_UNUSUAL;
    }
    headers = PyTuple_GET_ITEM(r, 4);
    if (PyTuple_CheckExact(headers)) {
        n_headers = PyTuple_GET_SIZE(headers);
        hs = ((PyTupleObject *)headers)->ob_item;
    }
    else if (PyList_CheckExact(headers)) {
        n_headers = PyList_GET_SIZE(headers);
        hs = ((PyListObject *)headers)->ob_item;  /* NULL when empty: the loops do not run */
    }
    else {
        return ENC_UNUSUAL;
    }
    if (n_headers > INT32_MAX) {
        return ENC_UNUSUAL;
    }

    /* Size of the body: attributes, deltas, key, value, header count, headers. */
    Py_ssize_t size = 1 + uleb_size(zigzag64(ts_delta)) + uleb_size(zigzag32(offset_delta));
    size += key_len < 0 ? 1 : uleb_size(zigzag32(key_len)) + key_len;
    size += value_len < 0 ? 1 : uleb_size(zigzag32(value_len)) + value_len;
    size += uleb_size(zigzag32(n_headers));
    for (Py_ssize_t i = 0; i < n_headers; i++) {
        PyObject *h_key, *h_value, *encoded;
        Py_ssize_t h_value_len, h_key_len;
        const char *h_key_data;
        if (!header_parts(hs[i], &h_key, &h_value, &h_value_len)) {
            return ENC_UNUSUAL;
        }
        int e = header_key(h_key, &h_key_data, &h_key_len, &encoded);
        if (e != ENC_OK) {
            return e;
        }
        Py_XDECREF(encoded);
        size += uleb_size(zigzag32(h_key_len)) + h_key_len;
        size += h_value_len < 0 ? 1 : uleb_size(zigzag32(h_value_len)) + h_value_len;
        if (size > INT32_MAX) {
            return ENC_UNUSUAL;
        }
    }
    if (size > INT32_MAX) {
        return ENC_UNUSUAL;
    }

    int e = reserve(enc, uleb_size(zigzag32(size)) + size);
    if (e != ENC_OK) {
        return e;
    }
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(enc->buf) + enc->len;
    unsigned char *p = put_uleb(start, zigzag32(size));
    *p++ = 0;  /* attributes: no record attributes are defined */
    p = put_uleb(p, zigzag64(ts_delta));
    p = put_uleb(p, zigzag32(offset_delta));
    p = put_uleb(p, zigzag32(key_len));
    if (key_len > 0) {
        memcpy(p, PyBytes_AS_STRING(key), (size_t)key_len);
        p += key_len;
    }
    p = put_uleb(p, zigzag32(value_len));
    if (value_len > 0) {
        memcpy(p, PyBytes_AS_STRING(value), (size_t)value_len);
        p += value_len;
    }
    p = put_uleb(p, zigzag32(n_headers));
    for (Py_ssize_t i = 0; i < n_headers; i++) {
        PyObject *h_key, *h_value, *encoded;
        Py_ssize_t h_value_len, h_key_len;
        const char *h_key_data;
        header_parts(hs[i], &h_key, &h_value, &h_value_len);
        /* Encoded a second time for a key that is not ASCII (rare): it gives the same bytes. */
        if ((e = header_key(h_key, &h_key_data, &h_key_len, &encoded)) != ENC_OK) {
            return e;
        }
        p = put_uleb(p, zigzag32(h_key_len));
        memcpy(p, h_key_data, (size_t)h_key_len);
        p += h_key_len;
        Py_XDECREF(encoded);
        p = put_uleb(p, zigzag32(h_value_len));
        if (h_value_len > 0) {
            memcpy(p, PyBytes_AS_STRING(h_value), (size_t)h_value_len);
            p += h_value_len;
        }
    }
    if (p - start != uleb_size(zigzag32(size)) + size) {  /* cannot happen: sized above */
        PyErr_SetString(PyExc_SystemError, "encode_records: a record's size was miscounted");
        return ENC_ERROR;
    }
    enc->len += p - start;
    enc->prev_delta = offset_delta;
    if (ts > enc->max_ts) {
        enc->max_ts = ts;
    }
    enc->count++;
    return ENC_OK;
}

/* encode_one over items[0:n]: ENC_OK, or the first status that is not. */
static int
encode_items(encoder *enc, PyObject *const *items, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int e = encode_one(enc, items[i]);
        if (e != ENC_OK) {
            return e;
        }
    }
    return ENC_OK;
}

/* The result tuple, the buffer cut to the block's length. */
static PyObject *
encode_result(encoder *enc)
{
    PyObject *block;
    if (enc->buf == NULL) {
        block = PyBytes_FromStringAndSize(NULL, 0);
    }
    else {
        block = enc->buf;
        enc->buf = NULL;
        if (enc->len != enc->cap && _PyBytes_Resize(&block, enc->len) != 0) {
            return NULL;
        }
    }
    if (block == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NnLL)", block, enc->count, (long long)enc->prev_delta,
                         (long long)enc->max_ts);
}

/* Hand over to encode_records_pure with these records and the caller's base arguments. */
static PyObject *
encode_pure(PyObject *records, PyObject *const *args)
{
    PyObject *call[3] = {records, args[1], args[2]};
    return PyObject_Vectorcall(encode_fallback, call, 3, NULL);
}

/* A one-shot iterable: items are encoded as they come and kept, to be replayed to the pure
 * function (followed by the rest of the iterator) if one of them is outside the plain case. */
static PyObject *
encode_iterable(encoder *enc, PyObject *const *args)
{
    PyObject *it = PyObject_GetIter(args[0]);
    if (it == NULL) {
        PyErr_Clear();  /* not iterable: the pure loop raises its own TypeError */
        return encode_pure(args[0], args);
    }
    PyObject *taken = PyList_New(0), *item, *result = NULL;
    if (taken == NULL) {
        goto done;
    }
    while ((item = PyIter_Next(it)) != NULL) {
        int appended = PyList_Append(taken, item);
        Py_DECREF(item);  /* taken holds it */
        if (appended != 0) {
            goto done;
        }
        int e = encode_one(enc, item);
        if (e == ENC_ERROR) {
            goto done;
        }
        if (e == ENC_UNUSUAL) {
            PyObject *replay = PyObject_CallFunctionObjArgs(chain_type, taken, it, NULL);
            if (replay != NULL) {
                result = encode_pure(replay, args);
                Py_DECREF(replay);
            }
            goto done;
        }
    }
    if (!PyErr_Occurred()) {  /* else the iterator's own error, as the pure loop meets it */
        result = encode_result(enc);
    }
done:
    Py_XDECREF(taken);
    Py_DECREF(it);
    return result;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_offset, base_timestamp)\n"
"--\n\n"
"Encode records as a records block: (block, count, last_offset_delta, max_timestamp)\n"
"(tierlog.log.record.encode_records_pure in C, which gets any input outside the plain case).");

static PyObject *
encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    encoder enc = {.buf = NULL, .len = 0, .cap = 0, .prev_delta = -1, .max_ts = -1, .count = 0};
    (void)module;
    if (encode_fallback == NULL || record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "tierlog.log._speedups is not configured for encode_records");
        return NULL;
    }
    if (kwnames != NULL || nargs != 3 || !as_int64(args[1], &enc.base_offset)
        || !as_int64(args[2], &enc.base_timestamp)) {
        return PyObject_Vectorcall(encode_fallback, args, (size_t)nargs, kwnames);
    }
    PyObject *records = args[0], *result;
    int e;
    if (PyTuple_CheckExact(records)) {
        e = encode_items(&enc, ((PyTupleObject *)records)->ob_item, PyTuple_GET_SIZE(records));
    }
    else if (PyList_CheckExact(records)) {
        /* encode_one runs no Python code, so the list cannot change under it (with the GIL). */
#ifdef Py_GIL_DISABLED
        Py_BEGIN_CRITICAL_SECTION(records);
#endif
        e = encode_items(&enc, ((PyListObject *)records)->ob_item, PyList_GET_SIZE(records));
#ifdef Py_GIL_DISABLED
        Py_END_CRITICAL_SECTION();
#endif
    }
    else {
        result = encode_iterable(&enc, args);
        Py_XDECREF(enc.buf);
        return result;
    }
    switch (e) {
    case ENC_OK:
        result = encode_result(&enc);
        break;
    case ENC_UNUSUAL:
        result = encode_pure(records, args);
        break;
    default:
        result = NULL;
        break;
    }
    Py_XDECREF(enc.buf);
    return result;
}

PyDoc_STRVAR(configure_encode_doc,
"configure_encode(fallback)\n"
"--\n\n"
"Give encode_records the pure encoder it hands unusual input to (tierlog.log.record does this\n"
"once, at import, after configure).");

static PyObject *
configure_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 1 || !PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "configure_encode() takes 1 callable argument");
        return NULL;
    }
    if (chain_type == NULL) {
        PyObject *itertools = PyImport_ImportModule("itertools");
        if (itertools == NULL) {
            return NULL;
        }
        chain_type = PyObject_GetAttrString(itertools, "chain");
        Py_DECREF(itertools);
        if (chain_type == NULL) {
            return NULL;
        }
    }
    Py_XSETREF(encode_fallback, Py_NewRef(args[0]));
    Py_RETURN_NONE;
}
