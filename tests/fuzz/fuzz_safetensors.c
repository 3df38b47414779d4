/* libFuzzer target: the safetensors header parser. Every input goes through
 * pol_st_check_buffer; one it accepts is also opened through pol_st_open (from a memfd, so
 * the mmap path runs too), which must agree, and then every tensor is walked: each byte read,
 * float tensors converted to fp32, lookups by name checked. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "policy/safetensors.h"

/* Reads every byte so the sanitizer sees any pointer outside the mapping. */
static unsigned touch(const pol_tensor *t)
{
    unsigned sum = 0;
    const volatile uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        sum += p[i];
    return sum;
}

static void walk(const pol_st *st)
{
    const char *prev = NULL;
    for (size_t i = 0; i < pol_st_count(st); i++) {
        const pol_tensor *t = pol_st_at(st, i);
        if ((prev && strcmp(prev, t->name) >= 0) || pol_st_find(st, t->name) != t)
            __builtin_trap(); /* not in strict name order, or lookup disagrees */
        if (t->nbytes != (size_t)t->numel * pol_dtype_size(t->dtype))
            __builtin_trap();
        prev = t->name;
        (void)touch(t);
        if (t->dtype == POL_DT_F32 || t->dtype == POL_DT_F16 || t->dtype == POL_DT_BF16) {
            float *out = malloc(((size_t)t->numel + 1) * sizeof *out);
            if (out && pol_tensor_to_f32(t, out) != 0)
                __builtin_trap();
            free(out);
        }
    }
    (void)pol_st_metadata(st, "format");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    int rc = pol_st_check_buffer(data, size, err, sizeof err);
    if (rc != 0 && strlen(err) == 0)
        __builtin_trap(); /* a rejection must say why */
    int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    pol_st *st = NULL;
    int rc_open = pol_st_open(path, &st, err, sizeof err);
    close(fd);
    if ((rc == 0) != (rc_open == 0))
        __builtin_trap(); /* the buffer check and the file reader must agree */
    if (st)
        walk(st);
    pol_st_free(st);
    return 0;
}
