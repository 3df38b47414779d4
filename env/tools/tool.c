/* Tool plumbing shared by every tool: result helpers, the argument schema check, invoke. */
#include "tools/tool.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strbuf.h"

void tool_result_deinit(tool_result *res)
{
    free(res->content);
    json_decref(res->data);
    json_decref(res->final_eval);
    res->content = NULL;
    res->data = NULL;
    res->final_eval = NULL;
    res->is_error = false;
    res->terminal = false;
}

static void tool_set(tool_result *res, bool is_error, json_t *data, char *content)
{
    tool_result_deinit(res);
    res->is_error = is_error;
    res->data = data ? data : json_object();
    res->content = content ? content : strdup("");
}

static char *format_content(const char *fmt, va_list ap)
{
    strbuf sb = STRBUF_INIT;
    sb_vprintf(&sb, fmt, ap);
    return sb_steal(&sb);
}

void tool_ok_take(tool_result *res, json_t *data, char *content)
{
    tool_set(res, false, data, content);
}

void tool_ok(tool_result *res, json_t *data, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *content = format_content(fmt, ap);
    va_end(ap);
    tool_set(res, false, data, content);
}

void tool_fail(tool_result *res, const char *error_code, json_t *data, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *content = format_content(fmt, ap);
    va_end(ap);
    tool_set(res, true, data, content);
    json_object_set_new(res->data, "error_code", json_string(error_code));
}

/* ---- JSON schema subset -------------------------------------------------------------------- */

static bool type_matches(const char *type, const json_t *v)
{
    if (strcmp(type, "object") == 0)
        return json_is_object(v);
    if (strcmp(type, "array") == 0)
        return json_is_array(v);
    if (strcmp(type, "string") == 0)
        return json_is_string(v);
    if (strcmp(type, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (strcmp(type, "number") == 0)
        return json_is_number(v);
    if (strcmp(type, "null") == 0)
        return json_is_null(v);
    return false;
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

static int check_at(const json_t *schema, const json_t *v, const char *where, char *err,
                    size_t cap);

static int check_object(const json_t *schema, const json_t *v, const char *where, char *err,
                        size_t cap)
{
    const json_t *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required");
    size_t i;
    const json_t *name;
    json_array_foreach(req, i, name)
    {
        if (!json_object_get(v, json_string_value(name))) {
            snprintf(err, cap, "missing required argument '%s%s'", where, json_string_value(name));
            return -1;
        }
    }
    const char *key;
    json_t *val;
    bool closed = json_is_false(json_object_get(schema, "additionalProperties"));
    char sub[256];
    json_object_foreach((json_t *)v, key, val)
    {
        const json_t *ps = props ? json_object_get(props, key) : NULL;
        if (!ps) {
            if (closed) {
                snprintf(err, cap, "unknown argument '%s%s'", where, key);
                return -1;
            }
            continue;
        }
        snprintf(sub, sizeof sub, "%s%s", where, key);
        if (check_at(ps, val, sub, err, cap) != 0)
            return -1;
    }
    return 0;
}

static int check_at(const json_t *schema, const json_t *v, const char *where, char *err, size_t cap)
{
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type && !type_matches(type, v)) {
        snprintf(err, cap, "argument '%s' must be %s %s, got %s", where,
                 strchr("aeiou", type[0]) ? "an" : "a", type, json_type_name(v));
        return -1;
    }
    const json_t *en = json_object_get(schema, "enum");
    if (en) {
        size_t i;
        const json_t *opt;
        bool found = false;
        json_array_foreach(en, i, opt) found = found || json_equal(opt, v);
        if (!found) {
            char *allowed = json_dumps(en, JSON_COMPACT);
            snprintf(err, cap, "argument '%s' must be one of %s", where, allowed ? allowed : "");
            free(allowed);
            return -1;
        }
    }
    const json_t *mn = json_object_get(schema, "minimum"), *mx = json_object_get(schema, "maximum");
    if (json_is_number(v) && mn && json_number_value(v) < json_number_value(mn)) {
        snprintf(err, cap, "argument '%s' must be >= %g", where, json_number_value(mn));
        return -1;
    }
    if (json_is_number(v) && mx && json_number_value(v) > json_number_value(mx)) {
        snprintf(err, cap, "argument '%s' must be <= %g", where, json_number_value(mx));
        return -1;
    }
    if (json_is_object(v)) {
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%s%s", where, where[0] ? "." : "");
        return check_object(schema, v, prefix, err, cap);
    }
    if (json_is_array(v)) {
        const json_t *mi = json_object_get(schema, "minItems");
        if (mi && json_array_size(v) < (size_t)json_integer_value(mi)) {
            snprintf(err, cap, "argument '%s' needs at least %lld item(s)", where,
                     (long long)json_integer_value(mi));
            return -1;
        }
        const json_t *items = json_object_get(schema, "items");
        size_t i;
        const json_t *it;
        char sub[256];
        json_array_foreach(v, i, it)
        {
            snprintf(sub, sizeof sub, "%s[%zu]", where, i);
            if (items && check_at(items, it, sub, err, cap) != 0)
                return -1;
        }
    }
    return 0;
}

int tool_schema_check(const json_t *schema, const json_t *value, char *err, size_t errcap)
{
    if (!json_is_object(value)) {
        snprintf(err, errcap, "tool arguments must be a JSON object, got %s",
                 json_type_name(value));
        return -1;
    }
    return check_object(schema, value, "", err, errcap);
}

/* Parsed schemas, one per tool, built on first use and kept: tools are few and fixed, and
 * Jansson values that are only read may be shared between threads. */
#define SCHEMA_CACHE_SIZE 32
static struct {
    const tool_def *tool;
    json_t *schema;
} schema_cache[SCHEMA_CACHE_SIZE];
static pthread_mutex_t schema_lock = PTHREAD_MUTEX_INITIALIZER;

static json_t *schema_of(const tool_def *tool)
{
    json_t *found = NULL;
    pthread_mutex_lock(&schema_lock);
    for (int i = 0; i < SCHEMA_CACHE_SIZE && !found; i++) {
        if (schema_cache[i].tool == tool) {
            found = schema_cache[i].schema;
        } else if (!schema_cache[i].tool) {
            found = json_loads(tool->schema, 0, NULL);
            if (found) {
                schema_cache[i].tool = tool;
                schema_cache[i].schema = found;
            }
            break;
        }
    }
    pthread_mutex_unlock(&schema_lock);
    return found;
}

void tool_invoke(const tool_def *tool, const tool_env *env, const json_t *args, tool_result *res)
{
    json_t *schema = schema_of(tool);
    char err[512];
    if (!schema) {
        tool_fail(res, "INTERNAL", NULL, "tool %s has an invalid schema", tool->name);
        return;
    }
    int bad = tool_schema_check(schema, args, err, sizeof err);
    if (bad) {
        tool_fail(res, "INVALID_TOOL_CALL", json_pack("{s:s}", "detail", err), "%s: %s", tool->name,
                  err);
        return;
    }
    tool->run(env, args, res);
}
