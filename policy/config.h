/* config: a decoder model's shape from a Hugging Face `config.json` (Qwen2/Qwen2.5, Qwen3, Llama
 * 3). Missing optional fields take HF's defaults for the architecture; a missing required field, a
 * wrong type or an inconsistent shape (heads not dividing, head_dim x heads odd, ...) is an error
 * that names the field. */
#ifndef KGYM_POLICY_CONFIG_H
#define KGYM_POLICY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { POL_ARCH_QWEN2, POL_ARCH_QWEN3, POL_ARCH_LLAMA } pol_arch;

typedef enum { POL_ROPE_DEFAULT, POL_ROPE_LLAMA3 } pol_rope_type;

#define POL_MAX_EOS 8

typedef struct pol_config {
    pol_arch arch;       /* from "model_type": qwen2, qwen3, llama */
    int vocab_size;      /* embedding rows (may exceed the tokenizer's ids: padding rows) */
    int hidden;          /* hidden_size */
    int n_layers;        /* num_hidden_layers */
    int n_heads;         /* num_attention_heads */
    int n_kv_heads;      /* num_key_value_heads (default n_heads) */
    int head_dim;        /* explicit "head_dim" (Qwen3), else hidden / n_heads */
    int ffn;             /* intermediate_size */
    int max_pos;         /* max_position_embeddings */
    float rms_eps;       /* rms_norm_eps */
    double rope_theta;   /* rope_theta */
    bool tie_embeddings; /* tie_word_embeddings */
    bool attn_bias; /* q/k/v biases: Qwen2 always; Llama "attention_bias"; Qwen3 "attention_bias" */
    bool qk_norm;   /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    /* rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
     * original_max_position_embeddings}; POL_ROPE_DEFAULT when absent */
    pol_rope_type rope_type;
    double rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max_pos;
    int bos_id; /* -1 when none */
    int eos_ids[POL_MAX_EOS];
    int n_eos;
    char torch_dtype[16]; /* "bfloat16", "float32", ... ("" when absent) */
} pol_config;

/* Parses config.json text. Returns 0, or -1 with err filled. */
int pol_config_parse(const char *json_text, pol_config *c, char *err, size_t errcap);
/* Reads PATH (a config.json, or a directory holding one). */
int pol_config_load(const char *path, pol_config *c, char *err, size_t errcap);
/* "qwen2", "qwen3", "llama". */
const char *pol_arch_name(pol_arch a);

#endif
