/* kgym-policy inspect: a checkpoint's config, tensors, dtypes and sizes, and whether the CPU
 * reference would load it. */
#include "cli_common.h"
#include "cmds.h"

#include "policy/config.h"
#include "policy/model.h"
#include "policy/safetensors.h"
#include "util/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char INSPECT_HELP[] =
    "usage: kgym-policy inspect PATH [--json]\n"
    "\n"
    "Shows a checkpoint: its config (when PATH is a folder with config.json), every tensor with\n"
    "dtype, shape and size, the parameter count, and whether the CPU reference would load it\n"
    "(the first missing, misshapen or unexpected tensor). Needs no tokenizer.\n"
    "\n"
    "  PATH    a model folder, a model.safetensors file or a model.safetensors.index.json\n"
    "  --json  one JSON object instead of text\n"
    "\n"
    "exit status: 0 ok (even when the check finds a problem), 1 unreadable checkpoint, 2 usage\n";

typedef struct {
    size_t n_params, bytes, dtype_count[POL_DT_COUNT];
} st_totals;

static json_t *tensor_json(const pol_tensor *t)
{
    json_t *shape = json_array();
    for (int d = 0; shape && d < t->ndim; d++)
        json_array_append_new(shape, json_integer(t->shape[d]));
    return json_pack("{s:s, s:s, s:o, s:I, s:s}", "name", t->name, "dtype",
                     pol_dtype_name(t->dtype), "shape", shape, "bytes", (json_int_t)t->nbytes,
                     "file", t->file);
}

static st_totals totals_of(const pol_st *st)
{
    st_totals s = {0};
    for (size_t i = 0; i < pol_st_count(st); i++) {
        const pol_tensor *t = pol_st_at(st, i);
        s.n_params += (size_t)t->numel;
        s.bytes += t->nbytes;
        s.dtype_count[t->dtype]++;
    }
    return s;
}

static json_t *config_json(const pol_config *c)
{
    json_t *j = json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:b, s:b, s:s}", "arch",
        pol_arch_name(c->arch), "vocab_size", c->vocab_size, "hidden", c->hidden, "layers",
        c->n_layers, "heads", c->n_heads, "kv_heads", c->n_kv_heads, "head_dim", c->head_dim, "ffn",
        c->ffn, "max_positions", c->max_pos, "rms_eps", (double)c->rms_eps, "rope_theta",
        c->rope_theta, "tied_embeddings", c->tie_embeddings, "qkv_bias", c->attn_bias, "qk_norm",
        c->qk_norm, "rope_type", c->rope_type == POL_ROPE_LLAMA3 ? "llama3" : "default");
    json_t *eos = cli_ids_json(c->eos_ids, c->n_eos);
    if (j && eos)
        json_object_set_new(j, "eos_ids", eos);
    return j;
}

static void print_config_text(const pol_config *c)
{
    printf("config: %s, hidden %d, layers %d, heads %d (kv %d), head_dim %d, ffn %d, vocab %d\n"
           "        tied embeddings %s, q/k/v bias %s, q/k norm %s, rope theta %g (%s), "
           "rms eps %g\n",
           pol_arch_name(c->arch), c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
           c->ffn, c->vocab_size, c->tie_embeddings ? "yes" : "no", c->attn_bias ? "yes" : "no",
           c->qk_norm ? "yes" : "no", c->rope_theta,
           c->rope_type == POL_ROPE_LLAMA3 ? "llama3 scaling" : "default", (double)c->rms_eps);
}

static void print_inspect_text(const char *path, const pol_st *st, const pol_config *cfg,
                               const char *check)
{
    st_totals s = totals_of(st);
    printf("checkpoint: %s\n", path);
    if (cfg)
        print_config_text(cfg);
    printf("tensors: %zu\n", pol_st_count(st));
    for (size_t i = 0; i < pol_st_count(st); i++) {
        const pol_tensor *t = pol_st_at(st, i);
        char shape[96] = "";
        for (int d = 0; d < t->ndim; d++)
            text_fmt(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        printf("  %-52s %-5s [%s]  %zu B\n", t->name, pol_dtype_name(t->dtype), shape, t->nbytes);
    }
    printf("parameters: %zu (%.3f M)\nbytes: %zu (%.3f MiB)\ndtypes:", s.n_params,
           (double)s.n_params / 1e6, s.bytes, (double)s.bytes / (1 << 20));
    for (int d = 0; d < POL_DT_COUNT; d++)
        if (s.dtype_count[d])
            printf(" %s x %zu", pol_dtype_name((pol_dtype)d), s.dtype_count[d]);
    printf("\n");
    if (cfg)
        printf("check: %s\n", check[0] ? check : "ok (loads as a language model)");
}

static void print_inspect_json(const char *path, const pol_st *st, const pol_config *cfg,
                               const char *check)
{
    st_totals s = totals_of(st);
    json_t *tensors = json_array(), *dtypes = json_object();
    for (size_t i = 0; i < pol_st_count(st); i++)
        json_array_append_new(tensors, tensor_json(pol_st_at(st, i)));
    for (int d = 0; d < POL_DT_COUNT; d++)
        if (s.dtype_count[d])
            json_object_set_new(dtypes, pol_dtype_name((pol_dtype)d),
                                json_integer((json_int_t)s.dtype_count[d]));
    json_t *j = json_pack("{s:s, s:o, s:o, s:I, s:I, s:o}", "path", path, "config",
                          cfg ? config_json(cfg) : json_null(), "tensors", tensors, "n_params",
                          (json_int_t)s.n_params, "bytes", (json_int_t)s.bytes, "dtypes", dtypes);
    if (j && cfg)
        json_object_set_new(
            j, "check",
            json_pack("{s:b, s:s?}", "ok", !check[0], "problem", check[0] ? check : NULL));
    cli_print_json(j);
    json_decref(j);
}

int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool as_json = false;
    opt_spec specs[] = {{"--json", false, NULL, &as_json}};
    int rc = cli_parse_args("inspect", INSPECT_HELP, argc, argv, specs, 1, &path);
    if (rc)
        return rc == 1 ? 0 : 2;
    if (!path)
        return cli_usage_error("inspect", "missing PATH");
    char err[ERRCAP] = "", check[ERRCAP] = "", cfg_path[4096];
    pol_config cfg;
    bool has_cfg = cli_is_dir(path) &&
                   text_fmt(cfg_path, sizeof cfg_path, "%s/config.json", path) &&
                   cli_is_file(cfg_path);
    if (has_cfg && pol_config_load(path, &cfg, err, ERRCAP) != 0)
        return cli_fail("inspect", err);
    pol_st *st = NULL;
    if (pol_st_open(path, &st, err, ERRCAP) != 0)
        return cli_fail("inspect", err);
    if (has_cfg && pol_model_check_tensors(&cfg, POL_HEAD_LM, st, path, check, ERRCAP) != 0 &&
        !check[0])
        text_fmt(check, ERRCAP, "check failed");
    if (as_json)
        print_inspect_json(path, st, has_cfg ? &cfg : NULL, check);
    else
        print_inspect_text(path, st, has_cfg ? &cfg : NULL, check);
    pol_st_free(st);
    return 0;
}
