/* Unit tests of the task store (env/task.c): the three loaders on fixtures made here, their
 * strict error handling, the CPU variant derived from "cpu_sizes", lookups and the JSON views. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "task.h"
#include "util/strbuf.h"

#define MODEL_PY "import torch\nclass Model(torch.nn.Module):\n    pass\n"

/* ---------------------------------------------------------------- fixture helpers */

static char g_root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_root, sizeof g_root, "/tmp/kgym_test_task_XXXXXX");
    return mkdtemp(g_root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* g_root/<rel>, in a static buffer (one at a time). */
static const char *path_of(const char *rel)
{
    static char buf[4][512];
    static int which;
    which = (which + 1) % 4;
    snprintf(buf[which], sizeof buf[which], "%s/%s", g_root, rel);
    return buf[which];
}

/* Creates g_root/<rel> with its parent folders. */
static void put_file_n(const char *rel, const char *content, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void put_file(const char *rel, const char *content)
{
    put_file_n(rel, content, strlen(content));
}

static void put_dir(const char *rel)
{
    assert_int_equal(mkdir(path_of(rel), 0755), 0);
}

/* A task folder of our format under tasks/<folder>. */
static void put_task(const char *folder, const char *task_json, bool with_cpu)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tasks/%s/model.py", folder);
    put_file(rel, MODEL_PY);
    if (task_json) {
        snprintf(rel, sizeof rel, "tasks/%s/task.json", folder);
        put_file(rel, task_json);
    }
    if (with_cpu) {
        snprintf(rel, sizeof rel, "tasks/%s/model_cpu.py", folder);
        put_file(rel, MODEL_PY "N = 4\n");
    }
}

/* ---------------------------------------------------------------- directory of task folders */

static void test_dir_loads_sorted_with_defaults(void **state)
{
    (void)state;
    put_task("zeta_gemm",
             "{\"name\": \"GEMM\", \"description\": \"d\", \"level\": 2, \"ops\": [\"nn.Linear\"],"
             " \"atol\": 0.05, \"est_eager_ms\": 3.5}",
             true);
    put_task("alpha", "{\"id\": \"custom/alpha\", \"suite\": \"mine\"}", false);
    put_task("mid", "{}", false);
    put_dir("tasks/.hidden");
    put_file("tasks/README.md", "not a task");

    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_dir(ts, path_of("tasks"), err, sizeof err), 3);
    assert_int_equal(task_store_count(ts), 3);

    const task *a = task_store_at(ts, 0);
    assert_string_equal(a->id, "custom/alpha");
    assert_string_equal(a->suite, "mine");
    assert_string_equal(a->name, "alpha"); /* folder name by default */
    assert_string_equal(a->description, "");
    assert_int_equal(a->level, 0);
    assert_null(a->code_cpu);

    const task *m = task_store_at(ts, 1);
    assert_string_equal(m->id, "kgym/mid");
    assert_string_equal(m->suite, "kgym");
    assert_true(m->atol == 1e-2 && m->rtol == 1e-2);

    const task *z = task_store_at(ts, 2);
    assert_string_equal(z->id, "kgym/zeta_gemm");
    assert_string_equal(z->name, "GEMM");
    assert_int_equal(z->level, 2);
    assert_true(z->atol == 0.05 && z->rtol == 1e-2);
    assert_string_equal(z->code, MODEL_PY);
    assert_non_null(z->code_cpu);
    assert_true(json_is_array(json_object_get(z->meta, "ops")));
    assert_true(json_real_value(json_object_get(z->meta, "est_eager_ms")) == 3.5);
    assert_null(json_object_get(z->meta, "name")); /* consumed, not duplicated into meta */
    assert_null(task_store_at(ts, 3));
    task_store_free(ts);
}

/* Loads tasks/ expecting failure with a message containing want; the store stays empty. */
static void expect_dir_error(const char *want)
{
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_dir(ts, path_of("tasks"), err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not mention \"%s\"", err, want);
    assert_int_equal(task_store_count(ts), 0);
    task_store_free(ts);
}

static void test_dir_missing_model_py(void **state)
{
    (void)state;
    put_task("good", "{}", false);
    put_file("tasks/nomodel/task.json", "{}");
    expect_dir_error("nomodel: task folder without model.py");
}

static void test_dir_missing_task_json(void **state)
{
    (void)state;
    put_task("nojson", NULL, false);
    expect_dir_error("nojson: task folder without task.json");
}

static void test_dir_bad_task_json(void **state)
{
    (void)state;
    put_task("bad", "{\"name\": ", false);
    expect_dir_error("bad/task.json: invalid JSON");
}

static void test_dir_bad_field_types(void **state)
{
    (void)state;
    put_task("t", "{\"level\": \"two\"}", false);
    expect_dir_error("\"level\" must be an integer");
    put_file("tasks/t/task.json", "{\"atol\": -1}");
    expect_dir_error("\"atol\" must be a finite number");
    put_file("tasks/t/task.json", "{\"id\": \"../escape\"}");
    expect_dir_error("invalid task id '../escape'");
    put_file("tasks/t/task.json", "{\"code\": \"x\"}");
    expect_dir_error("belongs in model.py");
    put_file("tasks/t/task.json", "[1, 2]");
    expect_dir_error("not a JSON object");
    put_file("tasks/t/task.json", "{\"name\": \"a\", \"name\": \"b\"}");
    expect_dir_error("invalid JSON");
}

static void test_dir_duplicate_id(void **state)
{
    (void)state;
    put_task("one", "{\"id\": \"kgym/same\"}", false);
    put_task("two", "{\"id\": \"kgym/same\"}", false);
    expect_dir_error("duplicate task id 'kgym/same'");
}

static void test_dir_bad_code_files(void **state)
{
    (void)state;
    put_task("t", "{}", false);
    put_file("tasks/t/model.py", "   \n\n");
    expect_dir_error("model.py: empty");
    put_file_n("tasks/t/model.py", "a\0b", 3);
    expect_dir_error("model.py: not UTF-8 text");
    put_file("tasks/t/model.py", "x = '\xff'\n");
    expect_dir_error("model.py: not UTF-8 text");

    size_t big = TASK_MAX_CODE_BYTES + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '#', big);
    put_file_n("tasks/t/model.py", text, big);
    free(text);
    expect_dir_error("over the limit");

    put_file("tasks/t/model.py", MODEL_PY);
    assert_int_equal(unlink(path_of("tasks/t/model.py")), 0);
    assert_int_equal(mkfifo(path_of("tasks/t/model.py"), 0644), 0);
    expect_dir_error("model.py: not a regular file");
}

static void test_dir_bad_folder_name(void **state)
{
    (void)state;
    put_task("has space", "{}", false);
    expect_dir_error("cannot form a task id");
}

static void test_dir_unreadable(void **state)
{
    (void)state;
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_dir(ts, path_of("nothing"), err, sizeof err), -1);
    assert_non_null(strstr(err, "nothing"));
    put_file("plain", "x");
    assert_int_equal(task_store_load_dir(ts, path_of("plain"), err, sizeof err), -1);
    assert_non_null(strstr(err, "plain"));
    assert_int_equal(task_store_load_dir(NULL, path_of("plain"), err, sizeof err), -1);
    task_store_free(ts);
}

/* ---------------------------------------------------------------- CPU variant from cpu_sizes */

/* A model.py with sizes at the top level, names that merely start like a size, a local of the
 * same name inside a function, and the name in a docstring and a comment. */
#define SIZED_PY                                                                                   \
    "\"\"\"Model at BATCH = 4096 rows.\"\"\"\n"                                                    \
    "import torch\n"                                                                               \
    "\n"                                                                                           \
    "# Problem size.\n"                                                                            \
    "BATCH = 4096\n"                                                                               \
    "BATCH_SIZE = 3\n"                                                                             \
    "SCALE = 0.5  # a float\n"                                                                     \
    "EPS = 1e-5\n"                                                                                 \
    "FEATURES = (4096 *\n"                                                                         \
    "            2)\n"                                                                             \
    "\n"                                                                                           \
    "\n"                                                                                           \
    "def get_inputs():\n"                                                                          \
    "    BATCH = 1\n"                                                                              \
    "    return [torch.randn(BATCH, FEATURES)]\n"

static void test_dir_cpu_sizes_derive(void **state)
{
    (void)state;
    put_file("tasks/t/model.py", SIZED_PY);
    put_file("tasks/t/task.json",
             "{\"cpu_sizes\": {\"BATCH\": 8, \"SCALE\": 2.0, \"EPS\": 0.1, \"FEATURES\": -16},"
             " \"ops\": [\"x\"]}");
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_dir(ts, path_of("tasks"), err, sizeof err), 1);
    const task *t = task_store_at(ts, 0);
    assert_string_equal(t->code, SIZED_PY);
    /* Only the top-level lines change, whole (the comment after SCALE goes, the continuation
     * line of FEATURES stays: the rule is textual); 2.0 stays a float; 0.1 prints exactly. */
    assert_string_equal(t->code_cpu, "\"\"\"Model at BATCH = 4096 rows.\"\"\"\n"
                                     "import torch\n"
                                     "\n"
                                     "# Problem size.\n"
                                     "BATCH = 8\n"
                                     "BATCH_SIZE = 3\n"
                                     "SCALE = 2.0\n"
                                     "EPS = 0.10000000000000001\n"
                                     "FEATURES = -16\n"
                                     "            2)\n"
                                     "\n"
                                     "\n"
                                     "def get_inputs():\n"
                                     "    BATCH = 1\n"
                                     "    return [torch.randn(BATCH, FEATURES)]\n");
    assert_null(json_object_get(t->meta, "cpu_sizes")); /* consumed, not duplicated into meta */
    assert_non_null(json_object_get(t->meta, "ops"));
    json_t *d = task_detail_json(t);
    assert_true(json_is_true(json_object_get(d, "has_cpu_variant")));
    assert_null(json_object_get(d, "cpu_sizes"));
    json_decref(d);
    task_store_free(ts);

    /* CRLF lines stay CRLF; no final newline is kept as is; an empty object derives the code
     * unchanged (a model already small enough); null is the same as absent. */
    put_file("tasks/t/model.py", "A = 1\r\nB = 2");
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"A\": 5, \"B\": 9.5367431640625e-07}}");
    put_file("tasks/u/model.py", MODEL_PY);
    put_file("tasks/u/task.json", "{\"cpu_sizes\": {}}");
    put_file("tasks/v/model.py", MODEL_PY);
    put_file("tasks/v/model_cpu.py", "n = 1\n");
    put_file("tasks/v/task.json", "{\"cpu_sizes\": null}");
    ts = task_store_new();
    assert_int_equal(task_store_load_dir(ts, path_of("tasks"), err, sizeof err), 3);
    assert_string_equal(task_store_at(ts, 0)->code_cpu, "A = 5\r\nB = 9.5367431640625e-07");
    assert_string_equal(task_store_at(ts, 1)->code_cpu, MODEL_PY);
    assert_string_equal(task_store_at(ts, 2)->code_cpu, "n = 1\n");
    task_store_free(ts);
}

static void test_dir_cpu_sizes_errors(void **state)
{
    (void)state;
    char want[600];
    put_task("good", "{\"cpu_sizes\": {}}", false); /* a failure rolls back the good ones too */
    put_file("tasks/t/model.py", SIZED_PY);

    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": 8, \"ROWS\": 4}}");
    snprintf(want, sizeof want,
             "%s: \"cpu_sizes\" sets ROWS, but no top-level line reads \"ROWS = ...\"",
             path_of("tasks/t/model.py"));
    expect_dir_error(want);

    /* BATCH_SIZE is not BATCH; "BATCH=4096" (other spacing) does not count either. */
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH_\": 8}}");
    expect_dir_error("t/model.py: \"cpu_sizes\" sets BATCH_, but no top-level line");
    put_file("tasks/t/model.py", "BATCH=4096\n");
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": 8}}");
    expect_dir_error("t/model.py: \"cpu_sizes\" sets BATCH, but no top-level line");

    /* An indented assignment is a local, not the size. */
    put_file("tasks/t/model.py", "def f():\n    BATCH = 4096\n\tBATCH = 4096\n");
    expect_dir_error("t/model.py: \"cpu_sizes\" sets BATCH, but no top-level line");

    put_file("tasks/t/model.py", "BATCH = 4096\nx = 1\nBATCH = 2048\n");
    expect_dir_error("t/model.py: \"cpu_sizes\" sets BATCH, but 2 top-level lines read "
                     "\"BATCH = ...\" (one must)");

    put_file("tasks/t/model.py", SIZED_PY);
    put_file("tasks/t/model_cpu.py", MODEL_PY);
    snprintf(want, sizeof want, "%s: both model_cpu.py and task.json \"cpu_sizes\"",
             path_of("tasks/t"));
    expect_dir_error(want);
    assert_int_equal(unlink(path_of("tasks/t/model_cpu.py")), 0);

    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": \"8\"}}");
    expect_dir_error("t/task.json: \"cpu_sizes\": BATCH must be a number");
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": true}}");
    expect_dir_error("\"cpu_sizes\": BATCH must be a number");
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": [8]}}");
    expect_dir_error("\"cpu_sizes\": BATCH must be a number");
    put_file("tasks/t/task.json", "{\"cpu_sizes\": {\"BATCH\": null}}");
    expect_dir_error("\"cpu_sizes\": BATCH must be a number");

    put_file("tasks/t/task.json", "{\"cpu_sizes\": [8]}");
    expect_dir_error("t/task.json: \"cpu_sizes\" must be an object");
    const char *bad_names[] = {"", "1BATCH", "BA TCH", "BATCH = 1\\nimport os\\nX", "BÄTCH", "a-b"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        char json[200];
        snprintf(json, sizeof json, "{\"cpu_sizes\": {\"%s\": 8}}", bad_names[i]);
        put_file("tasks/t/task.json", json);
        expect_dir_error("is not a Python identifier");
    }
}

/* ---------------------------------------------------------------- Ops-style JSONL */

static void test_jsonl_loads_in_line_order(void **state)
{
    (void)state;
    put_file("ops.jsonl",
             "{\"code\": \""
             "import torch\\n"
             "\", \"ops\": [\"torch.relu\", \"nn.Conv2d\"],"
             " \"data_source\": \"torch#2\"}\n"
             "\n"
             "   \r\n"
             "{\"id\": \"ops/custom\", \"code\": \"a = 1\\n\", \"name\": \"Named\", \"level\": 1,"
             " \"rtol\": 0.001, \"code_cpu\": \"a = 2\\n\"}\r\n"
             "{\"code\": \"b = 1\\n\", \"suite\": \"extra\", \"ops\": \"torch.add\"}\n"
             "{\"code\": \"c = 1\\n\"}");
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_jsonl(ts, path_of("ops.jsonl"), err, sizeof err), 4);

    const task *t0 = task_store_at(ts, 0);
    assert_string_equal(t0->id, "ops/1");
    assert_string_equal(t0->suite, "ops");
    assert_string_equal(t0->name, "torch.relu+nn.Conv2d");
    assert_string_equal(t0->code, "import torch\n");
    assert_string_equal(json_string_value(json_object_get(t0->meta, "data_source")), "torch#2");
    assert_null(json_object_get(t0->meta, "code"));

    const task *t1 = task_store_at(ts, 1);
    assert_string_equal(t1->id, "ops/custom");
    assert_string_equal(t1->name, "Named");
    assert_int_equal(t1->level, 1);
    assert_true(t1->rtol == 0.001 && t1->atol == 1e-2);
    assert_string_equal(t1->code_cpu, "a = 2\n");

    const task *t2 = task_store_at(ts, 2);
    assert_string_equal(t2->id, "extra/5"); /* blank lines still count */
    assert_string_equal(t2->suite, "extra");
    assert_string_equal(t2->name, "torch.add");

    const task *t3 = task_store_at(ts, 3);
    assert_string_equal(t3->id, "ops/6"); /* last line without a newline */
    assert_string_equal(t3->name, "ops/6");
    task_store_free(ts);
}

/* Loads <rel> with the Ops loader expecting failure mentioning want; the store keeps its
 * earlier tasks (preloaded of them). */
static void expect_jsonl_error(task_store *ts, const char *rel, const char *want)
{
    size_t before = task_store_count(ts);
    char err[512] = "";
    assert_int_equal(task_store_load_jsonl(ts, path_of(rel), err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not mention \"%s\"", err, want);
    assert_int_equal(task_store_count(ts), before);
}

static void test_jsonl_errors(void **state)
{
    (void)state;
    task_store *ts = task_store_new();
    char want[600];

    put_file("bad.jsonl", "{\"code\": \"a\"}\n\n{\"code\": \"b\"\n{\"code\": \"c\"}\n");
    snprintf(want, sizeof want, "%s:3: invalid JSON", path_of("bad.jsonl"));
    expect_jsonl_error(ts, "bad.jsonl", want);

    put_file("nocode.jsonl", "{\"code\": \"a\"}\n{\"ops\": [\"x\"]}\n");
    snprintf(want, sizeof want, "%s:2: missing \"code\"", path_of("nocode.jsonl"));
    expect_jsonl_error(ts, "nocode.jsonl", want);

    put_file("codetype.jsonl", "{\"code\": 5}\n");
    expect_jsonl_error(ts, "codetype.jsonl", ":1: \"code\" must be a string");
    put_file("emptycode.jsonl", "{\"code\": \"  \\n\"}\n");
    expect_jsonl_error(ts, "emptycode.jsonl", ":1: \"code\" is empty");
    put_file("nulcode.jsonl", "{\"code\": \"a\\u0000b\"}\n");
    expect_jsonl_error(ts, "nulcode.jsonl", ":1: invalid JSON");
    put_file("array.jsonl", "[1]\n");
    expect_jsonl_error(ts, "array.jsonl", ":1: not a JSON object");
    put_file("dup.jsonl",
             "{\"id\": \"x/1\", \"code\": \"a\"}\n{\"id\": \"x/1\", \"code\": \"b\"}\n");
    expect_jsonl_error(ts, "dup.jsonl", "duplicate task id 'x/1'");
    put_file("badid.jsonl", "{\"id\": \"a//b\", \"code\": \"a\"}\n");
    expect_jsonl_error(ts, "badid.jsonl", "invalid task id");
    put_file("badsuite.jsonl", "{\"suite\": \"a/b\", \"code\": \"a\"}\n");
    expect_jsonl_error(ts, "badsuite.jsonl", "invalid suite");
    expect_jsonl_error(ts, "missing.jsonl", "No such file");
    put_dir("adir");
    expect_jsonl_error(ts, "adir", "not a regular file");

    /* A second load of the same ids fails as a whole and keeps the first. */
    put_file("ok.jsonl", "{\"code\": \"a\"}\n{\"code\": \"b\"}\n");
    char err[512];
    assert_int_equal(task_store_load_jsonl(ts, path_of("ok.jsonl"), err, sizeof err), 2);
    put_file("overlap.jsonl",
             "{\"id\": \"new/1\", \"code\": \"a\"}\n{\"id\": \"ops/2\", \"code\": \"b\"}\n");
    expect_jsonl_error(ts, "overlap.jsonl", "duplicate task id 'ops/2'");
    assert_null(task_store_find(ts, "new/1"));
    assert_non_null(task_store_find(ts, "ops/1"));
    assert_non_null(task_store_find(ts, "ops/2"));
    task_store_free(ts);
}

static void test_jsonl_cpu_sizes(void **state)
{
    (void)state;
    put_file("sz.jsonl", "{\"code\": \"N = 64\\nM = 2\\n\", \"cpu_sizes\": {\"N\": 4}}\n");
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_jsonl(ts, path_of("sz.jsonl"), err, sizeof err), 1);
    assert_string_equal(task_store_at(ts, 0)->code_cpu, "N = 4\nM = 2\n");
    assert_null(json_object_get(task_store_at(ts, 0)->meta, "cpu_sizes"));

    put_file("both.jsonl", "{\"code\": \"N = 64\\n\", \"code_cpu\": \"N = 4\\n\","
                           " \"cpu_sizes\": {\"N\": 4}}\n");
    expect_jsonl_error(ts, "both.jsonl", ":1: both \"code_cpu\" and \"cpu_sizes\"");
    put_file("noname.jsonl", "{\"code\": \"N = 64\\n\", \"cpu_sizes\": {\"K\": 4}}\n");
    expect_jsonl_error(ts, "noname.jsonl", ":1: \"code\": \"cpu_sizes\" sets K, but no top-level");
    put_file("badval.jsonl", "{\"code\": \"N = 64\\n\", \"cpu_sizes\": {\"N\": \"4\"}}\n");
    expect_jsonl_error(ts, "badval.jsonl", ":1: \"cpu_sizes\": N must be a number");
    task_store_free(ts);
}

static void test_jsonl_line_limit(void **state)
{
    (void)state;
    size_t n = TASK_MAX_LINE_BYTES + 16;
    char *line = malloc(n + 1);
    assert_non_null(line);
    memset(line, ' ', n);
    memcpy(line, "{\"code\": \"", 10);
    line[n - 2] = '"';
    line[n - 1] = '}';
    line[n] = '\0';
    put_file("long.jsonl", line);
    free(line);
    task_store *ts = task_store_new();
    expect_jsonl_error(ts, "long.jsonl", "over the limit");
    task_store_free(ts);
}

/* ---------------------------------------------------------------- KernelBench */

static void test_kb_checkout(void **state)
{
    (void)state;
    put_file("kb/level1/10_Ten.py", "ten = 1\n");
    put_file("kb/level1/2_Two_things_.py", "two = 1\n");
    put_file("kb/level1/1_One.py", "one = 1\n");
    put_file("kb/level1/__init__.py", "");
    put_file("kb/level1/notes.txt", "skip me");
    put_file("kb/level3/5_Net.py", "net = 1\n");

    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_kernelbench(ts, path_of("kb"), err, sizeof err), 4);
    const char *ids[] = {"kb/L1/1", "kb/L1/2", "kb/L1/10", "kb/L3/5"};
    const char *names[] = {"1_One", "2_Two_things_", "10_Ten", "5_Net"};
    for (size_t i = 0; i < 4; i++) {
        const task *t = task_store_at(ts, i);
        assert_string_equal(t->id, ids[i]);
        assert_string_equal(t->name, names[i]);
        assert_string_equal(t->suite, "kernelbench");
    }
    const task *t = task_store_find(ts, "kb/L1/2");
    assert_int_equal(t->level, 1);
    assert_string_equal(t->code, "two = 1\n");
    assert_int_equal(json_integer_value(json_object_get(t->meta, "problem_id")), 2);
    assert_string_equal(json_string_value(json_object_get(t->meta, "file")),
                        "level1/2_Two_things_.py");
    task_store_free(ts);

    /* A repository root: KernelBench/level*. */
    put_file("repo/KernelBench/level2/7_Fuse.py", "fuse = 1\n");
    ts = task_store_new();
    assert_int_equal(task_store_load_kernelbench(ts, path_of("repo"), err, sizeof err), 1);
    assert_string_equal(task_store_at(ts, 0)->id, "kb/L2/7");
    task_store_free(ts);
}

static void expect_kb_error(const char *rel, const char *want)
{
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_kernelbench(ts, path_of(rel), err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not mention \"%s\"", err, want);
    assert_int_equal(task_store_count(ts), 0);
    task_store_free(ts);
}

static void test_kb_checkout_errors(void **state)
{
    (void)state;
    put_file("kb/level1/1_One.py", "one = 1\n");
    put_file("kb/level1/helper.py", "x = 1\n");
    expect_kb_error("kb", "helper.py: not named <problem_id>_<Name>.py");

    put_file("kb2/level1/1_One.py", "one = 1\n");
    put_file("kb2/level1/01_Again.py", "again = 1\n");
    expect_kb_error("kb2", "duplicate task id 'kb/L1/1'");

    put_file("kb3/level2/3_Empty.py", "");
    expect_kb_error("kb3", "3_Empty.py: empty");

    put_file("kb4/other/1_A.py", "a = 1\n");
    expect_kb_error("kb4", "no level1..level3 folder");
    expect_kb_error("nowhere", "No such file");
}

static void test_kb_jsonl(void **state)
{
    (void)state;
    put_file(
        "kb.jsonl",
        "{\"level\": 2, \"problem_id\": 1, \"name\": \"1_Conv_ReLU.py\", \"code\": \"c = 1\\n\"}\n"
        "{\"level\": 1, \"problem_id\": 12, \"name\": \"12_Gemm.py\", \"code\": \"g = 1\\n\"}\n"
        "\n"
        "{\"level\": 1, \"problem_id\": 3, \"code\": \"t = 1\\n\", \"extra\": true}\n");
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_kernelbench(ts, path_of("kb.jsonl"), err, sizeof err), 3);
    assert_string_equal(task_store_at(ts, 0)->id, "kb/L1/3");
    assert_string_equal(task_store_at(ts, 0)->name, "3");
    assert_true(json_is_true(json_object_get(task_store_at(ts, 0)->meta, "extra")));
    assert_string_equal(task_store_at(ts, 1)->id, "kb/L1/12");
    assert_string_equal(task_store_at(ts, 1)->name, "12_Gemm");
    assert_string_equal(task_store_at(ts, 2)->id, "kb/L2/1");
    assert_string_equal(task_store_at(ts, 2)->name, "1_Conv_ReLU");
    assert_null(json_object_get(task_store_at(ts, 2)->meta, "level"));
    task_store_free(ts);
}

static void test_kb_jsonl_errors(void **state)
{
    (void)state;
    put_file("nopid.jsonl", "{\"level\": 1, \"code\": \"a\"}\n");
    expect_kb_error("nopid.jsonl", ":1: missing \"problem_id\"");
    put_file("nolevel.jsonl", "{\"problem_id\": 1, \"code\": \"a\"}\n");
    expect_kb_error("nolevel.jsonl", ":1: missing \"level\"");
    put_file("nocode.jsonl", "{\"level\": 1, \"problem_id\": 1}\n");
    expect_kb_error("nocode.jsonl", ":1: missing \"code\"");
    put_file("badlevel.jsonl", "{\"level\": 0, \"problem_id\": 1, \"code\": \"a\"}\n");
    expect_kb_error("badlevel.jsonl", "\"level\" must be an integer");
    put_file("dup.jsonl", "{\"level\": 1, \"problem_id\": 4, \"code\": \"a\"}\n"
                          "{\"level\": 1, \"problem_id\": 4, \"code\": \"b\"}\n");
    expect_kb_error("dup.jsonl", "duplicate task id 'kb/L1/4'");
    put_file("garbage.jsonl", "{\"level\": 1, \"problem_id\": 1, \"code\": \"a\"}\nnot json\n");
    expect_kb_error("garbage.jsonl", "garbage.jsonl:2: invalid JSON");
}

/* ---------------------------------------------------------------- lookups and JSON views */

static void test_many_tasks_lookup(void **state)
{
    (void)state;
    enum { N = 6000 };
    strbuf sb = STRBUF_INIT;
    for (int i = 0; i < N; i++)
        assert_int_equal(sb_printf(&sb, "{\"code\": \"x = %d\\n\", \"ops\": [\"op%d\"]}\n", i, i),
                         0);
    put_file("many.jsonl", sb.data);
    sb_free(&sb);

    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_jsonl(ts, path_of("many.jsonl"), err, sizeof err), N);
    assert_int_equal(task_store_count(ts), N);
    char id[32], code[32];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "ops/%d", i + 1);
        snprintf(code, sizeof code, "x = %d\n", i);
        const task *t = task_store_find(ts, id);
        assert_non_null(t);
        assert_ptr_equal(t, task_store_at(ts, (size_t)i));
        assert_string_equal(t->code, code);
    }
    assert_null(task_store_find(ts, "ops/0"));
    assert_null(task_store_find(ts, "ops/6001"));
    assert_null(task_store_find(ts, NULL));
    assert_null(task_store_find(NULL, "ops/1"));
    assert_int_equal(task_store_count(NULL), 0);

    /* A later, different source adds to the same store. */
    put_task("extra", "{}", false);
    assert_int_equal(task_store_load_dir(ts, path_of("tasks"), err, sizeof err), 1);
    assert_non_null(task_store_find(ts, "kgym/extra"));
    assert_non_null(task_store_find(ts, "ops/1"));
    task_store_free(ts);
}

static void test_json_views(void **state)
{
    (void)state;
    put_file("v.jsonl",
             "{\"id\": \"v/1\", \"code\": \"x = 1\\n\", \"code_cpu\": \"x = 0\\n\", \"level\": 2,"
             " \"description\": \"desc\", \"ops\": [\"torch.mm\"], \"has_cpu_variant\": \"no\"}\n"
             "{\"id\": \"v/2\", \"code\": \"y = 1\\n\"}\n");
    task_store *ts = task_store_new();
    char err[512] = "";
    assert_int_equal(task_store_load_jsonl(ts, path_of("v.jsonl"), err, sizeof err), 2);

    json_t *s = task_summary_json(task_store_find(ts, "v/1"));
    assert_non_null(s);
    assert_int_equal(json_object_size(s), 8);
    assert_string_equal(json_string_value(json_object_get(s, "id")), "v/1");
    assert_string_equal(json_string_value(json_object_get(s, "suite")), "ops");
    assert_int_equal(json_integer_value(json_object_get(s, "level")), 2);
    assert_string_equal(json_string_value(json_object_get(s, "name")), "torch.mm");
    assert_string_equal(json_string_value(json_object_get(s, "description")), "desc");
    assert_true(json_is_true(json_object_get(s, "has_cpu_variant")));
    /* sha256 of each reference's bytes (Python's hashlib.sha256(b"x = 1\n").hexdigest()) */
    assert_string_equal(json_string_value(json_object_get(s, "code_sha256")),
                        "9e26bf369911c45c243c684147b23fc9e1dcfcf257d299a1c632016a6fcd33f4");
    assert_string_equal(json_string_value(json_object_get(s, "code_cpu_sha256")),
                        "dbe37ac31a72d7ea53b9ebee11146250c80c9f28852885229dcf56019ea1f465");
    json_decref(s);

    json_t *d = task_detail_json(task_store_find(ts, "v/1"));
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "code")), "x = 1\n");
    assert_string_equal(json_string_value(json_object_get(d, "code_cpu")), "x = 0\n");
    assert_true(json_real_value(json_object_get(d, "atol")) == 1e-2);
    assert_true(json_real_value(json_object_get(d, "rtol")) == 1e-2);
    assert_true(json_is_array(json_object_get(d, "ops")));
    assert_true(json_is_true(json_object_get(d, "has_cpu_variant"))); /* meta never overrides */
    json_decref(d);

    d = task_detail_json(task_store_find(ts, "v/2"));
    assert_true(json_is_null(json_object_get(d, "code_cpu")));
    assert_true(json_is_null(json_object_get(d, "level")));
    assert_true(json_is_false(json_object_get(d, "has_cpu_variant")));
    assert_true(json_is_null(json_object_get(d, "code_cpu_sha256")));
    assert_string_equal(json_string_value(json_object_get(d, "description")), "");
    json_decref(d);
    assert_null(task_summary_json(NULL));
    assert_null(task_detail_json(NULL));
    task_store_free(ts);
}

static void test_id_validity(void **state)
{
    (void)state;
    const char *good[] = {"kgym/a", "kb/L1/1", "ops/12", "x", "a.b-c_d+e:f/g"};
    const char *bad[] = {"", "/a", "a/", "a//b", "a/../b", "./a", "a b", "a?b", "a%2f", NULL};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(task_id_valid(good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(task_id_valid(bad[i]));
    char longid[TASK_MAX_ID_LEN + 2];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_false(task_id_valid(longid));
    longid[TASK_MAX_ID_LEN] = '\0';
    assert_true(task_id_valid(longid));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dir_loads_sorted_with_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_missing_model_py, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_missing_task_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_bad_task_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_bad_field_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_duplicate_id, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_bad_code_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_bad_folder_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_unreadable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_cpu_sizes_derive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_cpu_sizes_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonl_loads_in_line_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonl_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonl_cpu_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonl_line_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kb_checkout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kb_checkout_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kb_jsonl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kb_jsonl_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_tasks_lookup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_views, setup, teardown),
        cmocka_unit_test(test_id_validity),
    };
    return cmocka_run_group_tests_name("task", tests, NULL, NULL);
}
