/* warp_logits: WARP's logits at every position of a prompt, through its C API.
 *
 * Not part of the build: WARP is the reference engine (sqliteai/warp), built by
 * hand outside the repository, and this driver links against its libwaste.a:
 *
 *   cc -O2 -I WARP/src -o warp_logits tools/reference/warp_logits.c WARP/libwaste.a -lm -lpthread
 *   warp_logits CONTAINER IDS.json STEP.bin PREFILL.bin
 *
 * IDS.json is a JSON list of token ids. STEP.bin receives float32 LE
 * [n][vocab]: the prompt fed one token at a time (waste_eval with n = 1, WARP's
 * decode path), row t the logits after token t. PREFILL.bin the same rows from
 * the whole-prompt path: for each t, a fresh state and waste_eval of the first
 * t+1 tokens at once (WARP's prefill, chunked as it chooses), row t its last
 * logits. Exit status 0 on success, 1 with a message otherwise. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "waste.h"

static int read_ids(const char *path, int32_t **ids, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 256, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    int c, in_num = 0;
    long cur = 0;
    while (v && (c = fgetc(f)) != EOF) {
        if (c >= '0' && c <= '9') { cur = cur * 10 + (c - '0'); in_num = 1; continue; }
        if (in_num) {
            if (k == cap) { cap *= 2; v = realloc(v, cap * sizeof *v); if (!v) break; }
            v[k++] = (int32_t)cur;
            cur = 0; in_num = 0;
        }
    }
    fclose(f);
    *ids = v; *n = k;
    return v && k > 0;
}

static int fail(const char *what, waste_ctx *ctx, waste_status st)
{
    fprintf(stderr, "warp_logits: %s: %s (%s)\n", what, waste_strerror(st),
            ctx ? waste_error_detail(ctx) : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: warp_logits CONTAINER IDS.json STEP.bin PREFILL.bin\n");
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (!read_ids(argv[2], &ids, &n)) { fprintf(stderr, "warp_logits: cannot read %s\n", argv[2]); return 1; }

    waste_cfg cfg;
    waste_cfg_init(&cfg);
    cfg.n_threads = 1;
    cfg.ctx_tokens = 4096;
    waste_ctx *ctx = NULL;
    waste_status st = waste_open(argv[1], &cfg, &ctx);
    if (st) return fail("open", ctx, st);

    FILE *fs = fopen(argv[3], "wb"), *fp = fopen(argv[4], "wb");
    if (!fs || !fp) { fprintf(stderr, "warp_logits: cannot write the outputs\n"); return 1; }
    const float *lg = NULL;
    size_t vocab = 0;
    for (size_t t = 0; t < n; t++) {
        st = waste_eval(ctx, ids + t, 1, &lg, &vocab);
        if (st) return fail("step", ctx, st);
        if (fwrite(lg, sizeof(float), vocab, fs) != vocab) return 1;
    }
    for (size_t t = 0; t < n; t++) {
        waste_state_reset(ctx);
        st = waste_eval(ctx, ids, t + 1, &lg, &vocab);
        if (st) return fail("prefill", ctx, st);
        if (fwrite(lg, sizeof(float), vocab, fp) != vocab) return 1;
    }
    if (fclose(fs) || fclose(fp)) return 1;
    waste_close(ctx);
    free(ids);
    printf("warp_logits: %zu positions x %zu logits\n", n, vocab);
    return 0;
}
