/* config: real checkpoints' config.json (as published, and as transformers 5 re-saves them),
 * HF's per-architecture defaults, the RoPE variants, and one test per error class. The
 * transformers-parsed comparison of saved configs lives in tests/policy/test_safetensors.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/config.h"

static pol_config parse_ok(const char *json)
{
    pol_config c;
    char err[512] = "";
    if (pol_config_parse(json, &c, err, sizeof err) != 0)
        fail_msg("parse failed: %s\n%s", err, json);
    return c;
}

static void expect_error(const char *json, const char *want)
{
    pol_config c;
    char err[512] = "";
    assert_int_equal(pol_config_parse(json, &c, err, sizeof err), -1);
    if (strncmp(err, "config.json: ", 13) != 0 || !strstr(err, want))
        fail_msg("error \"%s\" lacks \"%s\"\n%s", err, want, json);
}

/* ---- published configs ----------------------------------------------------------------------- */

static const char *qwen25_05b =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,"
    "\"initializer_range\":0.02,\"intermediate_size\":4864,\"max_position_embeddings\":32768,"
    "\"max_window_layers\":21,\"model_type\":\"qwen2\",\"num_attention_heads\":14,"
    "\"num_hidden_layers\":24,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.43.1\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

static void test_qwen25(void **state)
{
    (void)state;
    pol_config c = parse_ok(qwen25_05b);
    assert_int_equal(c.arch, POL_ARCH_QWEN2);
    assert_string_equal(pol_arch_name(c.arch), "qwen2");
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.hidden, 896);
    assert_int_equal(c.n_layers, 24);
    assert_int_equal(c.n_heads, 14);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn, 4864);
    assert_int_equal(c.max_pos, 32768);
    assert_true(c.rms_eps == 1e-6f);
    assert_true(c.rope_theta == 1e6);
    assert_true(c.tie_embeddings);
    assert_true(c.attn_bias);
    assert_false(c.qk_norm);
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
    assert_int_equal(c.bos_id, 151643);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 151645);
    assert_string_equal(c.torch_dtype, "bfloat16");
}

static void test_qwen3(void **state)
{
    (void)state;
    pol_config c = parse_ok(
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,"
        "\"attention_dropout\":0.0,\"bos_token_id\":151643,\"eos_token_id\":151645,"
        "\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":1024,\"initializer_range\":0.02,"
        "\"intermediate_size\":3072,\"max_position_embeddings\":40960,\"max_window_layers\":28,"
        "\"model_type\":\"qwen3\",\"num_attention_heads\":16,\"num_hidden_layers\":28,"
        "\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,\"rope_scaling\":null,"
        "\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
        "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
        "\"use_sliding_window\":false,\"vocab_size\":151936}");
    assert_int_equal(c.arch, POL_ARCH_QWEN3);
    assert_int_equal(c.hidden, 1024);
    assert_int_equal(c.n_heads, 16);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 128); /* explicit: 16 x 128 != 1024 is fine for Qwen3 */
    assert_int_equal(c.max_pos, 40960);
    assert_true(c.rope_theta == 1e6);
    assert_true(c.qk_norm);
    assert_false(c.attn_bias);
    assert_true(c.tie_embeddings);
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
}

static const char *llama31_8b =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],"
    "\"hidden_act\":\"silu\",\"hidden_size\":4096,\"initializer_range\":0.02,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":32,"
    "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
    "\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.43.0.dev0\",\"use_cache\":true,\"vocab_size\":128256}";

static void test_llama31(void **state)
{
    (void)state;
    pol_config c = parse_ok(llama31_8b);
    assert_int_equal(c.arch, POL_ARCH_LLAMA);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.ffn, 14336);
    assert_int_equal(c.max_pos, 131072);
    assert_true(c.rms_eps == 1e-5f);
    assert_true(c.rope_theta == 500000.0);
    assert_false(c.tie_embeddings);
    assert_false(c.attn_bias);
    assert_false(c.qk_norm);
    assert_int_equal(c.rope_type, POL_ROPE_LLAMA3);
    assert_true(c.rope_factor == 8.0);
    assert_true(c.rope_low_freq == 1.0);
    assert_true(c.rope_high_freq == 4.0);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_int_equal(c.bos_id, 128000);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_ids[0], 128001);
    assert_int_equal(c.eos_ids[2], 128009);
}

/* transformers 5 saves RoPE under "rope_parameters" and the dtype as "dtype". */
static void test_transformers5_layout(void **state)
{
    (void)state;
    pol_config c = parse_ok(
        "{\"model_type\":\"llama\",\"vocab_size\":128,\"hidden_size\":32,"
        "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"head_dim\":8,\"dtype\":\"float32\","
        "\"rope_parameters\":{\"factor\":8.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_theta\":500000.0,"
        "\"rope_type\":\"llama3\"}}");
    assert_int_equal(c.rope_type, POL_ROPE_LLAMA3);
    assert_true(c.rope_theta == 500000.0);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_string_equal(c.torch_dtype, "float32");
    c = parse_ok(
        "{\"model_type\":\"qwen2\",\"vocab_size\":128,\"hidden_size\":32,"
        "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":2,\"layer_types\":[\"full_attention\",\"full_attention\"],"
        "\"rope_parameters\":{\"rope_theta\":1000000.0,\"rope_type\":\"default\"},"
        "\"sliding_window\":null,\"use_sliding_window\":false,"
        "\"dtype\":\"bfloat16\",\"torch_dtype\":\"float16\"}");
    assert_true(c.rope_theta == 1e6);
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
    assert_string_equal(c.torch_dtype, "bfloat16"); /* "dtype" wins */
}

/* ---- defaults (transformers 5: Qwen2Config, Qwen3Config, LlamaConfig) ------------------------ */

#define REQUIRED(arch, hidden, heads)                                                              \
    "\"model_type\":\"" arch "\",\"vocab_size\":100,\"hidden_size\":" #hidden                      \
    ",\"intermediate_size\":48,\"num_hidden_layers\":3,\"num_attention_heads\":" #heads

static void test_defaults(void **state)
{
    (void)state;
    /* Qwen2: num_key_value_heads 32 (the class default), head_dim hidden / heads */
    pol_config c = parse_ok("{" REQUIRED("qwen2", 128, 64) "}");
    assert_int_equal(c.n_kv_heads, 32);
    assert_int_equal(c.head_dim, 2);
    assert_int_equal(c.max_pos, 32768);
    assert_true(c.rms_eps == 1e-6f);
    assert_true(c.rope_theta == 10000.0);
    assert_false(c.tie_embeddings);
    assert_true(c.attn_bias);
    assert_false(c.qk_norm);
    assert_int_equal(c.bos_id, -1);
    assert_int_equal(c.n_eos, 0);
    assert_string_equal(c.torch_dtype, "");
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
    /* Qwen3: head_dim 128, no biases unless asked */
    c = parse_ok("{" REQUIRED("qwen3", 128, 64) "}");
    assert_int_equal(c.n_kv_heads, 32);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.max_pos, 32768);
    assert_true(c.qk_norm);
    assert_false(c.attn_bias);
    assert_int_equal(c.bos_id, -1);
    /* Llama: kv heads = heads, 2048 positions, bos 1 and eos 2 */
    c = parse_ok("{" REQUIRED("llama", 64, 4) "}");
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_pos, 2048);
    assert_true(c.rope_theta == 10000.0);
    assert_false(c.tie_embeddings);
    assert_false(c.attn_bias);
    assert_int_equal(c.bos_id, 1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 2);
}

static void test_nulls_and_overrides(void **state)
{
    (void)state;
    /* null takes the "None" meaning: kv heads = heads, no bos/eos even for Llama */
    pol_config c = parse_ok("{" REQUIRED("qwen2", 64, 4) ",\"num_key_value_heads\":null}");
    assert_int_equal(c.n_kv_heads, 4);
    c = parse_ok("{" REQUIRED("llama", 64, 4) ",\"bos_token_id\":null,\"eos_token_id\":null}");
    assert_int_equal(c.bos_id, -1);
    assert_int_equal(c.n_eos, 0);
    c = parse_ok("{" REQUIRED("llama", 64, 4) ",\"bos_token_id\":[7,8],\"eos_token_id\":[]}");
    assert_int_equal(c.bos_id, 7);
    assert_int_equal(c.n_eos, 0);
    /* Qwen2 has q/k/v biases whatever attention_bias says; Qwen3 and Llama follow it */
    c = parse_ok("{" REQUIRED("qwen2", 64, 4) ",\"num_key_value_heads\":4,"
                                              "\"attention_bias\":false}");
    assert_true(c.attn_bias);
    c = parse_ok("{" REQUIRED("qwen3", 64, 4) ",\"num_key_value_heads\":4,"
                                              "\"attention_bias\":true}");
    assert_true(c.attn_bias);
    c = parse_ok("{" REQUIRED("llama", 64, 4) ",\"attention_bias\":true,\"head_dim\":32}");
    assert_true(c.attn_bias);
    assert_int_equal(c.head_dim, 32);
    /* Qwen3 with head_dim null: the class default 128 */
    c = parse_ok("{" REQUIRED("qwen3", 64, 4) ",\"num_key_value_heads\":2,\"head_dim\":null}");
    assert_int_equal(c.head_dim, 128);
}

static void test_rope_variants(void **state)
{
    (void)state;
    /* rope_scaling wins over rope_parameters; its rope_theta over the top-level one */
    pol_config c = parse_ok("{" REQUIRED(
        "llama", 64, 4) ",\"rope_theta\":1234,"
                        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":99},"
                        "\"rope_scaling\":{\"type\":\"llama3\",\"factor\":32,"
                        "\"low_freq_factor\":1,\"high_freq_factor\":4}}");
    assert_int_equal(c.rope_type, POL_ROPE_LLAMA3);
    assert_true(c.rope_theta == 1234.0);
    assert_true(c.rope_factor == 32.0);
    assert_int_equal(c.rope_orig_max_pos, 2048); /* defaults to max_position_embeddings */
    c = parse_ok("{" REQUIRED(
        "llama", 64, 4) ",\"rope_theta\":1234,"
                        "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":99}}");
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
    assert_true(c.rope_theta == 99.0);
    c = parse_ok("{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":null,\"rope_theta\":5e5,"
                                              "\"partial_rotary_factor\":1.0}");
    assert_true(c.rope_theta == 5e5);
    assert_int_equal(c.rope_type, POL_ROPE_DEFAULT);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors_json_and_arch(void **state)
{
    (void)state;
    expect_error("{\"model_type\":", "not valid JSON");
    expect_error("[1]", "not a JSON object");
    expect_error("{\"model_type\":\"a\",\"model_type\":\"b\"}", "duplicate");
    expect_error("{\"vocab_size\":5}", "missing required field 'model_type'");
    expect_error("{\"model_type\":5}", "field 'model_type' is not a string");
    expect_error("{\"model_type\":\"mistral\"}", "model_type 'mistral' is not supported");
    pol_config c;
    char err[64];
    assert_int_equal(pol_config_parse(NULL, &c, err, sizeof err), -1);
}

static void test_errors_required(void **state)
{
    (void)state;
    const char *fields[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"};
    for (size_t i = 0; i < 5; i++) {
        /* drop one field from the published Qwen2.5 config */
        const char *at = strstr(qwen25_05b, fields[i]);
        assert_non_null(at);
        char json[2048], want[96];
        size_t head = (size_t)(at - qwen25_05b);
        snprintf(json, sizeof json, "%.*sx%s", (int)head, qwen25_05b, at);
        snprintf(want, sizeof want, "missing required field '%s'", fields[i]);
        expect_error(json, want);
    }
    expect_error("{" REQUIRED("llama", 64, 4) ",\"vocab_size\":\"100\"}", "duplicate");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":\"100\"}",
                 "field 'vocab_size' is not an integer");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":100.0}",
                 "field 'vocab_size' is not an integer");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":0}",
                 "field 'vocab_size' = 0 is out of range");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":-64}",
                 "field 'hidden_size' = -64 is out of range");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":2097152}",
                 "field 'hidden_size' = 2097152 is out of range");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":true}",
                 "field 'hidden_size' is not an integer");
}

static void test_errors_shape(void **state)
{
    (void)state;
    expect_error("{" REQUIRED("llama", 64, 4) ",\"num_key_value_heads\":3}",
                 "num_key_value_heads (3) does not divide num_attention_heads (4)");
    expect_error("{" REQUIRED("qwen2", 64, 4) "}",
                 "num_key_value_heads (32, HF's default) does not divide");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"num_key_value_heads\":0}",
                 "field 'num_key_value_heads' = 0");
    expect_error("{" REQUIRED("llama", 66, 4) "}",
                 "hidden_size (66) is not a multiple of num_attention_heads (4)");
    expect_error("{" REQUIRED("llama", 36, 4) "}", "head_dim (9) is odd");
    expect_error("{" REQUIRED("qwen3", 36, 4) ",\"num_key_value_heads\":4,\"head_dim\":7}",
                 "head_dim (7) is odd");
    expect_error("{" REQUIRED("qwen3", 36, 4) ",\"num_key_value_heads\":4,\"head_dim\":0}",
                 "field 'head_dim' = 0");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"max_position_embeddings\":0}",
                 "field 'max_position_embeddings' = 0");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rms_norm_eps\":0}",
                 "field 'rms_norm_eps' = 0 must be a positive number");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rms_norm_eps\":\"1e-6\"}",
                 "field 'rms_norm_eps' is not a number");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"tie_word_embeddings\":1}",
                 "field 'tie_word_embeddings' is not true or false");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"attention_bias\":\"no\"}",
                 "field 'attention_bias' is not true or false");
}

static void test_errors_rope(void **state)
{
    (void)state;
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_theta\":-1}", "field 'rope_theta'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":[1]}",
                 "field 'rope_scaling' is not an object");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_parameters\":7}",
                 "field 'rope_parameters' is not an object");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":{\"rope_type\":\"yarn\"}}",
                 "rope_scaling: rope type 'yarn' is not supported");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_parameters\":{\"rope_type\":\"linear\","
                                              "\"factor\":2}}",
                 "rope_parameters: rope type 'linear' is not supported");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":{\"rope_type\":3}}",
                 "'rope_type' is not a string");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":{\"rope_type\":\"llama3\","
                                              "\"low_freq_factor\":1,\"high_freq_factor\":4}}",
                 "llama3 rope scaling: missing 'factor'");
    expect_error(
        "{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":{\"rope_type\":\"llama3\","
                                     "\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":4}}",
        "high_freq_factor (4) must exceed low_freq_factor (4)");
    expect_error(
        "{" REQUIRED("llama", 64, 4) ",\"rope_scaling\":{\"rope_type\":\"llama3\","
                                     "\"factor\":-8,\"low_freq_factor\":1,\"high_freq_factor\":4}}",
        "field 'factor'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"partial_rotary_factor\":0.5}",
                 "partial_rotary_factor");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"rope_parameters\":{\"rope_type\":\"default\","
                                              "\"partial_rotary_factor\":0.5}}",
                 "partial_rotary_factor");
}

static void test_errors_unsupported_and_ids(void **state)
{
    (void)state;
    expect_error("{" REQUIRED("llama", 64, 4) ",\"hidden_act\":\"gelu\"}", "hidden_act");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"mlp_bias\":true}", "mlp_bias = true");
    expect_error("{" REQUIRED("qwen2", 64, 4) ",\"use_sliding_window\":true}",
                 "use_sliding_window = true");
    expect_error("{" REQUIRED("qwen2", 64, 4) ",\"layer_types\":[\"full_attention\","
                                              "\"sliding_attention\"]}",
                 "layer_types[1]");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"eos_token_id\":-1}", "field 'eos_token_id'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"eos_token_id\":\"</s>\"}",
                 "field 'eos_token_id'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}",
                 "field 'eos_token_id' lists 9 ids (at most 8)");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"eos_token_id\":[1,\"x\"]}",
                 "field 'eos_token_id'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"bos_token_id\":1.5}", "field 'bos_token_id'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"torch_dtype\":5}", "field 'torch_dtype'");
    expect_error("{" REQUIRED("llama", 64, 4) ",\"dtype\":\"a-very-long-dtype-name\"}",
                 "field 'dtype'");
}

/* ---- loading from disk ----------------------------------------------------------------------- */

static void test_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/kgym-cfg-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], link[128], err[512] = "";
    snprintf(path, sizeof path, "%s/blob", dir);
    snprintf(link, sizeof link, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(llama31_8b, f);
    fclose(f);
    assert_int_equal(symlink("blob", link), 0); /* as in HF's cache */
    pol_config c;
    assert_int_equal(pol_config_load(dir, &c, err, sizeof err), 0);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(pol_config_load(link, &c, err, sizeof err), 0);
    assert_int_equal(c.rope_type, POL_ROPE_LLAMA3);
    /* errors name the file */
    f = fopen(path, "w");
    fputs("{\"model_type\":\"gpt2\"}", f);
    fclose(f);
    assert_int_equal(pol_config_load(dir, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, link));
    assert_non_null(strstr(err, "model_type 'gpt2'"));
    unlink(link);
    unlink(path);
    assert_int_equal(pol_config_load(dir, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "config.json: No such file"));
    assert_int_equal(pol_config_load(NULL, &c, err, sizeof err), -1);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen25),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_transformers5_layout),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_nulls_and_overrides),
        cmocka_unit_test(test_rope_variants),
        cmocka_unit_test(test_errors_json_and_arch),
        cmocka_unit_test(test_errors_required),
        cmocka_unit_test(test_errors_shape),
        cmocka_unit_test(test_errors_rope),
        cmocka_unit_test(test_errors_unsupported_and_ids),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests_name("policy_config", tests, NULL, NULL);
}
