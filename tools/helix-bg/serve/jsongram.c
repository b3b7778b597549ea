/* jsongram.c — the JSON state machine of jsongram.h. */
#include "jsongram.h"

#include <string.h>

enum {
    M_START,      /* before the top-level '{' */
    M_VALUE,      /* a value must come (after ':' or ',' in an array) */
    M_ARR_FIRST,  /* after '[': a value or ']' */
    M_OBJ_FIRST,  /* after '{': a key or '}' */
    M_OBJ_KEY,    /* after ',' in an object: a key */
    M_COLON,      /* after a key */
    M_AFTER,      /* after a value in a container: ',' or the closing bracket */
    M_STRING,     /* inside a string */
    M_STR_ESC,    /* after '\' */
    M_STR_HEX,    /* inside \uXXXX, sub = digits read */
    M_NUMBER,     /* sub = N_* */
    M_LITERAL,    /* lit, sub = bytes written */
    M_DONE,
};

enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const literals[3] = {"true", "false", "null"};

void jg_init(jg_state *s, const jg_schema *sch) {
    memset(s, 0, sizeof *s);
    s->mode = M_START;
    s->sch = sch;
}

/* The schema applies here: the top-level object of a schema'd output. */
static bool schema_here(const jg_state *s) { return s->sch && s->depth == 1; }

/* The shortest value of a property's types. */
static const char *min_value(unsigned types) {
    if (!types || (types & (JG_T_NUMBER | JG_T_INTEGER))) return "0";
    if (types & JG_T_STRING) return "\"\"";
    if (types & JG_T_ARRAY) return "[]";
    if (types & JG_T_OBJECT) return "{}";
    if (types & JG_T_NULL) return "null";
    return "true";
}

bool jg_done(const jg_state *s) { return s->mode == M_DONE; }

static bool is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static bool top_is_object(const jg_state *s) { return s->depth && ((s->stack >> (s->depth - 1)) & 1); }

static bool push(jg_state *s, bool object) {
    if (s->depth >= JG_MAX_DEPTH) return false;
    if (object) s->stack |= 1ull << s->depth;
    else s->stack &= ~(1ull << s->depth);
    s->depth++;
    s->mode = object ? M_OBJ_FIRST : M_ARR_FIRST;
    return true;
}

/* A value just ended. */
static void value_done(jg_state *s) { s->mode = s->depth ? M_AFTER : M_DONE; }

static bool close_container(jg_state *s, unsigned c) {
    if (!s->depth || (c == '}') != top_is_object(s)) return false;
    s->depth--;
    value_done(s);
    return true;
}

/* Start of a value in M_VALUE / M_ARR_FIRST. */
static bool start_value(jg_state *s, unsigned c) {
    unsigned types = schema_here(s) && s->mode == M_VALUE ? s->sch->types[s->kcount - 1] : 0;
    s->num_int = 0;
    if (types) {
        unsigned need = c == '{' ? JG_T_OBJECT : c == '[' ? JG_T_ARRAY : c == '"' ? JG_T_STRING
                      : (c == 't' || c == 'f') ? JG_T_BOOLEAN : c == 'n' ? JG_T_NULL
                      : (c == '-' || is_digit(c)) ? (JG_T_NUMBER | JG_T_INTEGER) : 0;
        if (!(types & need)) return false;
        if ((need & JG_T_INTEGER) && !(types & JG_T_NUMBER)) s->num_int = 1;
    }
    switch (c) {
    case '{': return push(s, true);
    case '[': return push(s, false);
    case '"': s->mode = M_STRING; s->is_key = 0; s->u8need = 0; return true;
    case '-': s->mode = M_NUMBER; s->sub = N_MINUS; return true;
    case 't': case 'f': case 'n':
        s->mode = M_LITERAL;
        s->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        s->sub = 1;
        return true;
    default:
        if (is_digit(c)) { s->mode = M_NUMBER; s->sub = c == '0' ? N_ZERO : N_INT; return true; }
        return false;
    }
}

static bool number_terminal(unsigned sub) { return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP; }

/* One byte of a number; returns 1 consumed, 0 the number ended before c
 * (c must be handled by the following state), -1 invalid. */
static int number_byte(jg_state *s, unsigned c) {
    switch (s->sub) {
    case N_MINUS:
        if (c == '0') { s->sub = N_ZERO; return 1; }
        if (is_digit(c)) { s->sub = N_INT; return 1; }
        return -1;
    case N_ZERO:
    case N_INT:
        if (s->sub == N_INT && is_digit(c)) return 1;
        if (s->num_int && (c == '.' || c == 'e' || c == 'E')) return -1;
        if (c == '.') { s->sub = N_DOT; return 1; }
        if (c == 'e' || c == 'E') { s->sub = N_E; return 1; }
        return 0;
    case N_DOT:
        if (is_digit(c)) { s->sub = N_FRAC; return 1; }
        return -1;
    case N_FRAC:
        if (is_digit(c)) return 1;
        if (c == 'e' || c == 'E') { s->sub = N_E; return 1; }
        return 0;
    case N_E:
        if (c == '+' || c == '-') { s->sub = N_ESIGN; return 1; }
        if (is_digit(c)) { s->sub = N_EXP; return 1; }
        return -1;
    case N_ESIGN:
        if (is_digit(c)) { s->sub = N_EXP; return 1; }
        return -1;
    case N_EXP:
        if (is_digit(c)) return 1;
        return 0;
    }
    return -1;
}

/* One byte inside a string (M_STRING). */
static bool string_byte(jg_state *s, unsigned c) {
    if (s->is_key && schema_here(s)) {   /* the key is fixed: its bytes, then the quote */
        const jg_schema *k = s->sch;
        int i = s->kcount - 1;
        if (s->kpos < k->klen[i]) {
            if (c != (unsigned char)k->key[i][s->kpos]) return false;
            s->kpos++;
            return true;
        }
        if (c != '"') return false;
        s->mode = M_COLON;
        s->is_key = 0;
        return true;
    }
    if (s->u8need) {
        if (c < s->u8lo || c > s->u8hi) return false;
        s->u8need--;
        s->u8lo = 0x80;
        s->u8hi = 0xBF;
        return true;
    }
    if (c == '"') {
        if (s->is_key) { s->mode = M_COLON; s->is_key = 0; }
        else value_done(s);
        return true;
    }
    if (c == '\\') { s->mode = M_STR_ESC; return true; }
    if (c < 0x20) return false;
    if (c < 0x80) return true;
    s->u8lo = 0x80;
    s->u8hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) s->u8need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        s->u8need = 2;
        if (c == 0xE0) s->u8lo = 0xA0;
        if (c == 0xED) s->u8hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        s->u8need = 3;
        if (c == 0xF0) s->u8lo = 0x90;
        if (c == 0xF4) s->u8hi = 0x8F;
    } else return false;
    return true;
}

static bool feed_byte(jg_state *s, unsigned c) {
    if (s->mode <= M_AFTER && s->mode != M_STRING) {
        if (is_ws(c)) {
            /* no whitespace before the object; within it short runs with at most two line breaks */
            if (s->mode == M_START || s->ws >= JG_MAX_WS) return false;
            if (c == '\n' && ++s->nl > 2) return false;
            s->ws++;
            return true;
        }
        s->ws = 0;
        s->nl = 0;
    }
    switch (s->mode) {
    case M_START:
        return c == '{' && push(s, true);
    case M_VALUE:
        return start_value(s, c);
    case M_ARR_FIRST:
        if (c == ']') return close_container(s, c);
        return start_value(s, c);
    case M_OBJ_FIRST:
        if (c == '}') return !(schema_here(s) && s->sch->n > 0) && close_container(s, c);
        /* fallthrough */
    case M_OBJ_KEY:
        if (c != '"') return false;
        if (schema_here(s)) {
            if (s->kcount >= s->sch->n) return false;
            s->kcount++;
            s->kpos = 0;
        }
        s->mode = M_STRING;
        s->is_key = 1;
        s->u8need = 0;
        return true;
    case M_COLON:
        if (c != ':') return false;
        s->mode = M_VALUE;
        return true;
    case M_AFTER:
        if (schema_here(s)) {   /* every key, then the end */
            if (c == ',') { if (s->kcount >= s->sch->n) return false; s->mode = M_OBJ_KEY; return true; }
            return c == '}' && s->kcount == s->sch->n && close_container(s, c);
        }
        if (c == ',') { s->mode = top_is_object(s) ? M_OBJ_KEY : M_VALUE; return true; }
        if (c == '}' || c == ']') return close_container(s, c);
        return false;
    case M_STRING:
        return string_byte(s, c);
    case M_STR_ESC:
        if (c == 'u') { s->mode = M_STR_HEX; s->sub = 0; return true; }
        if (strchr("\"\\/bfnrt", (int)c) && c) { s->mode = M_STRING; return true; }
        return false;
    case M_STR_HEX:
        if (!is_hex(c)) return false;
        if (s->sub == 0 && (c == 'd' || c == 'D')) return false; /* U+D000..DFFF: keeps surrogates out */
        if (++s->sub == 4) s->mode = M_STRING;
        return true;
    case M_NUMBER: {
        int r = number_byte(s, c);
        if (r < 0) return false;
        if (r > 0) return true;
        value_done(s);   /* the number ended: c belongs to what follows */
        return feed_byte(s, c);
    }
    case M_LITERAL: {
        const char *l = literals[s->lit];
        if ((unsigned char)l[s->sub] != c) return false;
        if (!l[++s->sub]) value_done(s);
        return true;
    }
    default:
        return false;    /* M_DONE: nothing more */
    }
}

bool jg_feed(jg_state *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(s, (unsigned char)p[i])) return false;
    return true;
}

/* Appends str to tmp at *n. */
static void put(char *tmp, int *n, const char *str) {
    size_t l = strlen(str);
    memcpy(tmp + *n, str, l);
    *n += (int)l;
}

/* "key":value, the shortest value of its types. */
static void put_key(const jg_schema *sch, int k, char *tmp, int *n) {
    tmp[(*n)++] = '"';
    memcpy(tmp + *n, sch->key[k], sch->klen[k]);
    *n += sch->klen[k];
    put(tmp, n, "\":");
    put(tmp, n, min_value(sch->types[k]));
}

/* The schema keys from k on (a comma before all but key 0). */
static void put_keys(const jg_schema *sch, int k, char *tmp, int *n) {
    for (; k < sch->n; k++) {
        if (k > 0) tmp[(*n)++] = ',';
        put_key(sch, k, tmp, n);
    }
}

int jg_completion(const jg_state *s, char *buf, int cap) {
    char tmp[JG_MAX_COMPLETION];
    int n = 0;
    int depth = s->depth;
    bool sch = schema_here(s);
    int next_key = s->kcount;   /* schema: the first key the tail must still write */
    const char *cur_min = sch && s->kcount ? min_value(s->sch->types[s->kcount - 1]) : "0";
    switch (s->mode) {
    case M_START:
        tmp[n++] = '{';
        if (s->sch) put_keys(s->sch, 0, tmp, &n);
        tmp[n++] = '}';
        break;
    case M_VALUE: put(tmp, &n, cur_min); break;
    case M_ARR_FIRST: case M_OBJ_FIRST: case M_AFTER: break;
    case M_OBJ_KEY:
        if (sch) {   /* after a comma: the next key */
            put_key(s->sch, s->kcount, tmp, &n);
            next_key = s->kcount + 1;
        } else put(tmp, &n, "\"\":0");
        break;
    case M_COLON: tmp[n++] = ':'; put(tmp, &n, cur_min); break;
    case M_STR_ESC: tmp[n++] = 'n'; /* fallthrough */
    case M_STR_HEX:
        if (s->mode == M_STR_HEX) for (int i = s->sub; i < 4; i++) tmp[n++] = '0';
        /* fallthrough */
    case M_STRING:
        if (s->is_key && sch) {
            int i = s->kcount - 1;
            memcpy(tmp + n, s->sch->key[i] + s->kpos, (size_t)(s->sch->klen[i] - s->kpos));
            n += s->sch->klen[i] - s->kpos;
            tmp[n++] = '"';
            tmp[n++] = ':';
            put(tmp, &n, cur_min);
            break;
        }
        if (s->mode == M_STRING && s->u8need) {
            tmp[n++] = (char)s->u8lo;
            for (int i = 1; i < s->u8need; i++) tmp[n++] = (char)0x80;
        }
        tmp[n++] = '"';
        if (s->is_key) { tmp[n++] = ':'; tmp[n++] = '0'; }
        break;
    case M_NUMBER:
        if (!number_terminal(s->sub)) tmp[n++] = '0';
        break;
    case M_LITERAL: put(tmp, &n, literals[s->lit] + s->sub); break;
    default: break;
    }
    if (s->mode != M_START && s->mode != M_DONE)
        for (int d = depth; d > 0; d--) {
            if (d == 1 && s->sch) put_keys(s->sch, next_key, tmp, &n);
            tmp[n++] = ((s->stack >> (d - 1)) & 1) ? '}' : ']';
        }
    if (cap > 0) {
        int k = n < cap - 1 ? n : cap - 1;
        memcpy(buf, tmp, (size_t)k);
        buf[k] = 0;
    }
    return n;
}

int jg_dist(const jg_state *s) {
    char buf[JG_MAX_COMPLETION];
    return jg_completion(s, buf, (int)sizeof buf);
}
