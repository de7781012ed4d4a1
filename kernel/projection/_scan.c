/* Byte scans for the projection of big tool outputs, run with the GIL released (SPEC R-3).
 *
 * The projector hashes an output on one thread while another transforms it (projector.py); the
 * transform's two whole-input passes are here, in C, so they neither hold the GIL against the hash
 * nor run at Python speed:
 *
 *   json_array(data, head, tail) -> (verdict, items, head_stop, tail_from)
 *       Validates ``data`` as one strict JSON document (RFC 8259) whose top-level value is an
 *       array, counts its items and finds where the first ``head`` items end (the top-level comma
 *       after them) and where the last ``tail`` items start (just past the comma before them).
 *       verdict 0: a valid array (the other fields are set when it has more than head + tail
 *       items); 1: not one valid JSON array; 2: undecided (nesting deeper than MAX_DEPTH, a
 *       number whose magnitude reaches 1e308, a \u escape of a lone surrogate): the caller's
 *       general parsers decide, so those edge cases keep their Python behaviour.
 *
 *   repeated_runs(data, threshold) -> [(start, line_len, count), ...]
 *       Maximal runs of >= threshold identical consecutive newline-terminated lines, exactly
 *       (kernel.projection.fold's contract).
 *
 * The input is model-controlled: every read is bounds-checked against ``end``, the nesting stack
 * has a fixed size, and nothing is allocated per byte. kernel.projection.sample and .fold keep
 * pure-Python paths with the same results for machines where this module could not be built;
 * tests/kernel/test_projection_native.py holds the two to each other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_DEPTH 128
#define MAX_TAIL 1024

enum verdict { VALID = 0, NOT_ARRAY = 1, UNDECIDED = 2 };

typedef const unsigned char *cursor;

static inline cursor skip_ws(cursor p, cursor end)
{
    /* every byte that may start or follow a token is above ' '; whitespace is at or below it */
    if (p < end && *p > ' ')
        return p;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static int is_digit(unsigned char c)
{
    return (unsigned char)(c - '0') < 10;
}

/* The end of the run of ASCII digits at p: one compare per 16 bytes, not a branch per digit. */
static cursor digit_run(cursor p, cursor end)
{
#if defined(__SSE2__)
    while (end - p >= 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)p);
        /* '0'..'9' become -128..-119 (signed); every other byte compares greater */
        __m128i shifted = _mm_sub_epi8(bytes, _mm_set1_epi8((char)('0' + 128)));
        int mask = _mm_movemask_epi8(_mm_cmpgt_epi8(shifted, _mm_set1_epi8(-128 + 9)));
        if (mask)
            return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && is_digit(*p))
        p++;
    return p;
}

/* The end of the run of string bytes at p that need no attention: not '"', not a backslash, not
 * a control character, ASCII (a multi-byte character is checked apart). */
static cursor plain_run(cursor p, cursor end)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)p);
        /* signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them too */
        __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, backslash)),
                                       _mm_cmplt_epi8(bytes, space));
        int mask = _mm_movemask_epi8(special);
        if (mask)
            return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
        p++;
    return p;
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The code unit of the four hex digits at p, or -1. */
static long hex4(cursor p, cursor end)
{
    long value = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(p[i]);
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static Py_ssize_t utf8_sequence(cursor p, cursor end)
{
    unsigned char c = p[0];
    Py_ssize_t n;
    unsigned char low = 0x80, high = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            low = 0xA0; /* no overlongs */
        else if (c == 0xED)
            high = 0x9F; /* no UTF-16 surrogates */
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            low = 0x90;
        else if (c == 0xF4)
            high = 0x8F; /* nothing past U+10FFFF */
    }
    else
        return 0;
    if (end - p < n || p[1] < low || p[1] > high)
        return 0;
    for (Py_ssize_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* p is just past an opening quote: returns just past the closing one, or NULL (*verdict set). */
static inline cursor scan_string(cursor p, cursor end, enum verdict *verdict)
{
    for (;;) {
        p = plain_run(p, end);
        if (p >= end)
            goto invalid;
        unsigned char c = *p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            goto invalid;
        if (c >= 0x80) {
            Py_ssize_t n = utf8_sequence(p, end);
            if (n == 0)
                goto invalid;
            p += n;
            continue;
        }
        /* a backslash */
        if (end - p < 2)
            goto invalid;
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            continue;
        case 'u': {
            long unit = hex4(p + 2, end);
            if (unit < 0)
                goto invalid;
            p += 6;
            if (unit >= 0xD800 && unit <= 0xDBFF) {
                long low = (end - p >= 6 && p[0] == '\\' && p[1] == 'u') ? hex4(p + 2, end) : -1;
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    p += 6;
                    continue;
                }
                *verdict = UNDECIDED; /* a lone surrogate: parsers differ */
                return NULL;
            }
            if (unit >= 0xDC00 && unit <= 0xDFFF) {
                *verdict = UNDECIDED;
                return NULL;
            }
            continue;
        }
        default:
            goto invalid;
        }
    }
invalid:
    *verdict = NOT_ARRAY;
    return NULL;
}

/* p is at '-' or a digit: returns just past the number, or NULL (*verdict set). A number whose
 * decimal magnitude may reach f64's range (>= 1e308) is undecided: serde_json refuses it, the
 * Python parsers read infinity. */
static cursor scan_number(cursor p, cursor end, enum verdict *verdict)
{
    long magnitude; /* power of ten of the first significant digit; LONG_MIN for zero */
    int zero = 1;
    if (*p == '-')
        p++;
    if (p >= end)
        goto invalid;
    if (*p == '0') {
        p++;
        magnitude = 0;
    }
    else if (*p >= '1' && *p <= '9') {
        cursor first = p;
        p = digit_run(p, end);
        zero = 0;
        magnitude = (p - first > 100000) ? 100000 : (long)(p - first) - 1;
    }
    else
        goto invalid;
    if (p < end && *p == '.') {
        p++;
        cursor first = p;
        if (zero) {
            while (p < end && *p == '0')
                p++;
            if (p < end && is_digit(*p)) {
                zero = 0;
                long place = (long)(p - first) + 1;
                magnitude = -(place > 100000 ? 100000 : place);
            }
        }
        p = digit_run(p, end);
        if (p == first)
            goto invalid;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int negative = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            negative = *p == '-';
            p++;
        }
        cursor first = p;
        long exponent = 0;
        while (p < end && is_digit(*p)) {
            if (exponent < 1000000)
                exponent = exponent * 10 + (*p - '0');
            p++;
        }
        if (p == first)
            goto invalid;
        if (!zero)
            magnitude += negative ? -exponent : exponent;
    }
    if (!zero && magnitude >= 308) {
        *verdict = UNDECIDED;
        return NULL;
    }
    return p;
invalid:
    *verdict = NOT_ARRAY;
    return NULL;
}

static cursor scan_literal(cursor p, cursor end, const char *word, Py_ssize_t n)
{
    if (end - p < n || memcmp(p, word, (size_t)n) != 0)
        return NULL;
    return p + n;
}

typedef struct {
    Py_ssize_t items;     /* top-level items seen */
    Py_ssize_t head_stop; /* the top-level comma after item number `head` */
    Py_ssize_t tail_from; /* just past the comma before the last `tail` items */
} array_shape;

/* The whole validation: one value (which must be an array) between optional whitespace. */
static enum verdict scan_array(cursor start, cursor end, Py_ssize_t head, Py_ssize_t tail, array_shape *shape)
{
    /* stack[d] is '[' or '{' for the container at depth d + 1 */
    unsigned char stack[MAX_DEPTH];
    Py_ssize_t commas[MAX_TAIL]; /* ring of the last `tail` top-level comma offsets */
    Py_ssize_t depth = 0;
    enum verdict verdict = NOT_ARRAY;
    cursor p = skip_ws(start, end);

    shape->items = 0;
    shape->head_stop = -1;
    shape->tail_from = -1;
    if (p >= end || *p != '[')
        return NOT_ARRAY;
    stack[depth++] = '[';
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') { /* the empty array */
        p = skip_ws(p + 1, end);
        return p == end ? VALID : NOT_ARRAY;
    }
    for (;;) {
        /* expect a value */
        if (p >= end)
            return NOT_ARRAY;
        unsigned char c = *p;
        if (c == '[' || c == '{') {
            if (depth >= MAX_DEPTH)
                return UNDECIDED;
            stack[depth++] = c;
            p = skip_ws(p + 1, end);
            if (p < end && *p == (c == '[' ? ']' : '}')) {
                depth--;
                p++;
                goto after_value;
            }
            if (c == '[')
                continue;
            /* an object: a key, then a value */
            goto key;
        }
        if (c == '"')
            p = scan_string(p + 1, end, &verdict);
        else if (c == '-' || (c >= '0' && c <= '9'))
            p = scan_number(p, end, &verdict);
        else if (c == 't')
            p = scan_literal(p, end, "true", 4);
        else if (c == 'f')
            p = scan_literal(p, end, "false", 5);
        else if (c == 'n')
            p = scan_literal(p, end, "null", 4);
        else
            return NOT_ARRAY;
        if (p == NULL)
            return verdict;
    after_value:
        p = skip_ws(p, end);
        if (depth == 0)
            return p == end ? VALID : NOT_ARRAY;
        if (p >= end)
            return NOT_ARRAY;
        c = *p;
        if (c == ',') {
            if (depth == 1) {
                shape->items++;
                if (shape->items == head)
                    shape->head_stop = p - start;
                if (tail > 0)
                    commas[(shape->items - 1) % tail] = p - start;
            }
            p = skip_ws(p + 1, end);
            if (stack[depth - 1] == '[')
                continue;
            goto key;
        }
        if (c == (stack[depth - 1] == '[' ? ']' : '}')) {
            if (depth == 1) {
                shape->items++;
                /* items - 1 commas were seen; the one before the last `tail` items is number
                 * items - tail, stored at ring slot (items - tail - 1) % tail */
                if (tail > 0 && shape->items > tail)
                    shape->tail_from = commas[(shape->items - tail - 1) % tail] + 1;
            }
            depth--;
            p++;
            goto after_value;
        }
        return NOT_ARRAY;
    key:
        if (p >= end || *p != '"')
            return NOT_ARRAY;
        p = scan_string(p + 1, end, &verdict);
        if (p == NULL)
            return verdict;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return NOT_ARRAY;
        p = skip_ws(p + 1, end);
    }
}

static PyObject *json_array(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t head, tail;
    array_shape shape;
    enum verdict verdict;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nn:json_array", &view, &head, &tail))
        return NULL;
    if (head < 0 || tail < 0 || tail > MAX_TAIL) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "json_array: head >= 0 and 0 <= tail <= %d", MAX_TAIL);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    cursor start = (cursor)view.buf;
    verdict = scan_array(start, start + view.len, head, tail, &shape);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(innn)", (int)verdict, shape.items, shape.head_stop, shape.tail_from);
}

typedef struct {
    Py_ssize_t (*runs)[3];
    Py_ssize_t count, capacity;
    int failed;
} run_list;

static void add_run(run_list *list, Py_ssize_t start, Py_ssize_t length, Py_ssize_t count)
{
    if (list->failed)
        return;
    if (list->count == list->capacity) {
        Py_ssize_t capacity = list->capacity ? list->capacity * 2 : 64;
        void *grown = PyMem_RawRealloc(list->runs, (size_t)capacity * sizeof *list->runs);
        if (grown == NULL) {
            list->failed = 1;
            return;
        }
        list->runs = grown;
        list->capacity = capacity;
    }
    list->runs[list->count][0] = start;
    list->runs[list->count][1] = length;
    list->runs[list->count][2] = count;
    list->count++;
}

static void find_runs(cursor data, Py_ssize_t size, Py_ssize_t threshold, run_list *list)
{
    cursor p = data, end = data + size;
    cursor previous = NULL, run_start = NULL;
    Py_ssize_t previous_length = -1, count = 0;
    for (;;) {
        cursor newline = memchr(p, '\n', (size_t)(end - p));
        if (newline == NULL)
            break; /* a last line without a newline never joins a run */
        Py_ssize_t length = newline - p + 1;
        if (length == previous_length && memcmp(p, previous, (size_t)length) == 0)
            count++;
        else {
            if (count >= threshold)
                add_run(list, run_start - data, previous_length, count);
            run_start = p;
            previous_length = length;
            count = 1;
        }
        previous = p;
        p = newline + 1;
    }
    if (count >= threshold)
        add_run(list, run_start - data, previous_length, count);
}

static PyObject *repeated_runs(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t threshold;
    run_list list = {NULL, 0, 0, 0};
    PyObject *result = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*n:repeated_runs", &view, &threshold))
        return NULL;
    if (threshold < 1)
        threshold = 1; /* a run of one line is a run for any threshold below 1 */
    Py_BEGIN_ALLOW_THREADS
    find_runs((cursor)view.buf, view.len, threshold, &list);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (list.failed) {
        PyMem_RawFree(list.runs);
        return PyErr_NoMemory();
    }
    result = PyList_New(list.count);
    for (Py_ssize_t i = 0; result != NULL && i < list.count; i++) {
        PyObject *run = Py_BuildValue("(nnn)", list.runs[i][0], list.runs[i][1], list.runs[i][2]);
        if (run == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, i, run);
    }
    PyMem_RawFree(list.runs);
    return result;
}

static PyMethodDef methods[] = {
    {"json_array", json_array, METH_VARARGS,
     "json_array(data, head, tail) -> (verdict, items, head_stop, tail_from); see the module source."},
    {"repeated_runs", repeated_runs, METH_VARARGS,
     "repeated_runs(data, threshold) -> [(start, line_len, count)]: runs of identical lines."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "GIL-free byte scans for the tool-result projection.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    return PyModule_Create(&module_def);
}
