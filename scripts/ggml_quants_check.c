/* ggml's own quantizers as an oracle for chapter 08 (compiled and run by scripts/ggml_quants_check.sh
 * against ggml's ggml-quants.c, unchanged).
 *
 *   ggml_quants_check                      every data set through every type: a table of hashes
 *   ggml_quants_check quantize TYPE IN OUT IN's float32 (little-endian) through quantize_row_TYPE_ref
 *   ggml_quants_check dequantize TYPE IN OUT  IN's blocks through dequantize_row_TYPE, float32 out
 *
 * The table has one line per data set and type: "DATA TYPE bytes 0x... values 0x...", the FNV-1a
 * hashes (64 bits) of the bytes quantize_row_*_ref writes and of the float32 bits dequantize_row_*
 * gives back from them. tests/08_quantization/kquant_test.cpp builds the same data sets (the same
 * integer generator, exact in float everywhere) and holds tvlab to these numbers.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h"

/* ggml-quants.c calls these only from code this program does not run (the imatrix quantizers, the
 * row validation): they stop the program if ever reached. */
void ggml_abort(const char* file, int line, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "ggml_abort at %s:%d: ", file, line);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
  abort();
}
static void unused(const char* name) {
  fprintf(stderr, "ggml_quants_check: %s is not provided\n", name);
  abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type, (void)ne; unused("ggml_row_size"); return 0; }
size_t ggml_type_size(enum ggml_type type) { (void)type; unused("ggml_type_size"); return 0; }
const char* ggml_type_name(enum ggml_type type) { (void)type; unused("ggml_type_name"); return 0; }

typedef void (*quantize_fn)(const float*, void*, int64_t);
typedef void (*dequantize_fn)(const void*, float*, int64_t);

struct format {
  const char* name;
  int block, bytes;
  quantize_fn quantize;
  dequantize_fn dequantize;
};

#define FORMAT(NAME, type, block) \
  { NAME, block, (int)sizeof(block_##type), (quantize_fn)quantize_row_##type##_ref, (dequantize_fn)dequantize_row_##type }
static const struct format formats[] = {
    FORMAT("Q8_0", q8_0, 32), FORMAT("Q4_0", q4_0, 32), FORMAT("Q4_1", q4_1, 32), FORMAT("Q5_0", q5_0, 32),
    FORMAT("Q5_1", q5_1, 32), FORMAT("Q2_K", q2_K, 256), FORMAT("Q3_K", q3_K, 256), FORMAT("Q4_K", q4_K, 256),
    FORMAT("Q5_K", q5_K, 256), FORMAT("Q6_K", q6_K, 256),
};
enum { kFormats = sizeof(formats) / sizeof(formats[0]) };

static const struct format* find_format(const char* name) {
  for (int i = 0; i < kFormats; ++i)
    if (strcmp(formats[i].name, name) == 0) return &formats[i];
  fprintf(stderr, "ggml_quants_check: unknown type %s\n", name);
  exit(2);
}

static uint64_t fnv1a(const uint8_t* bytes, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

/* ------------------------------------------------------------------ the data sets */

static uint32_t state;
static float uniform(void) { /* 24 random bits in [0, 1) */
  state = state * 1664525u + 1013904223u;
  return (float)(state >> 8) * 0x1p-24f;
}
static float bell(void) { /* a sum of four uniforms, minus 2: mean 0, variance 1/3 */
  const float a = uniform(), b = uniform(), c = uniform(), d = uniform();
  return a + b + c + d - 2.0f;
}

/* "golden": 256 x 4096 weights: 1% of them x 20, every fifth super-block rounded to quarters (ties),
 * every seventh scaled by 1e-3. */
static void golden(float* x, size_t n) {
  state = 2024;
  for (size_t i = 0; i < n; ++i) {
    float v = uniform() + uniform() + uniform() + uniform() - 2.0f;
    if (uniform() < 0.01f) v *= 20.0f;
    if ((i / 256) % 5 == 3) v = (float)(int)(v * 8.0f) * 0.25f;
    x[i] = v * ((i / 256) % 7 == 2 ? 1e-3f : 1.0f);
  }
}

/* "edges": 64 super-blocks, super-block s of kind s % 16 (see the cases). */
static void edges(float* x, size_t n) {
  static const float decades[5] = {1e-2f, 1e-1f, 1.0f, 1e1f, 1e2f};
  state = 808;
  for (size_t i = 0; i < n; ++i) {
    const size_t s = i / 256, e = i % 256;
    const float v = bell();
    float out = 0.0f;
    switch (s % 16) {
      case 0: out = 0.0f; break;                                         /* all zero */
      case 1: out = v * 1e-30f; break;                                   /* tiny: scales far below fp16 */
      case 2: out = v * 3e4f; break;                                     /* large (|x| < 6e4) */
      case 3: out = e / 16 == 5 ? v : 0.0f; break;                       /* one sub-block of 16 among zeros */
      case 4: out = e == 77 ? 40.0f : v * 0.01f; break;                  /* one spike */
      case 5: out = v + 3.0f; break;                                     /* all positive */
      case 6: out = -2.5f; break;                                        /* constant, negative */
      case 7: out = 1.75f; break;                                        /* constant, positive */
      case 8: out = (float)(int)(v * 16.0f) * 0.125f; break;             /* eighths: ties */
      case 9: out = v * decades[(e / 32) % 5]; break;                    /* sub-blocks of other magnitudes */
      case 10: out = uniform() < 0.05f ? v * 50.0f : v; break;           /* 5% outliers x 50 */
      case 11: out = uniform() < 0.9f ? 0.0f : v; break;                 /* sparse */
      case 12: out = v * 1e-4f; break;                                   /* fp16 scales subnormal */
      case 13: out = v * 1e-7f; break;                                   /* fp16 scales 0 or the smallest */
      case 14: out = v; break;                                           /* plain */
      case 15: out = e % 2 ? v * 100.0f : v * 0.001f; break;             /* alternating magnitudes */
    }
    x[i] = out;
  }
}

static int table(void) {
  struct { const char* name; size_t n; void (*make)(float*, size_t); } sets[] = {
      {"golden", 256 * 4096, golden}, {"edges", 256 * 64, edges}};
  for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); ++s) {
    const size_t n = sets[s].n;
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    sets[s].make(x, n);
    for (int f = 0; f < kFormats; ++f) {
      const size_t nbytes = n / formats[f].block * formats[f].bytes;
      uint8_t* q = malloc(nbytes);
      formats[f].quantize(x, q, (int64_t)n);
      formats[f].dequantize(q, y, (int64_t)n);
      printf("%s %s bytes 0x%016llx values 0x%016llx\n", sets[s].name, formats[f].name,
             (unsigned long long)fnv1a(q, nbytes), (unsigned long long)fnv1a((const uint8_t*)y, n * sizeof(float)));
      free(q);
    }
    free(x);
    free(y);
  }
  return 0;
}

/* ------------------------------------------------------------------ files */

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "ggml_quants_check: cannot open %s\n", path); exit(2); }
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = malloc(*size ? *size : 1);
  if (fread(data, 1, *size, f) != *size) { fprintf(stderr, "ggml_quants_check: cannot read %s\n", path); exit(2); }
  fclose(f);
  return data;
}

static void write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size) { fprintf(stderr, "ggml_quants_check: cannot write %s\n", path); exit(2); }
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc == 1) return table();
  if (argc != 5) {
    fprintf(stderr, "usage: %s [quantize|dequantize TYPE IN OUT]\n", argv[0]);
    return 2;
  }
  const struct format* fmt = find_format(argv[2]);
  size_t size = 0;
  void* in = read_file(argv[3], &size);
  if (strcmp(argv[1], "quantize") == 0) {
    const size_t n = size / sizeof(float);
    if (n % (size_t)fmt->block) { fprintf(stderr, "ggml_quants_check: %zu floats, not whole blocks\n", n); return 2; }
    const size_t nbytes = n / fmt->block * fmt->bytes;
    void* out = malloc(nbytes ? nbytes : 1);
    fmt->quantize(in, out, (int64_t)n);
    write_file(argv[4], out, nbytes);
  } else if (strcmp(argv[1], "dequantize") == 0) {
    if (size % (size_t)fmt->bytes) { fprintf(stderr, "ggml_quants_check: %zu bytes, not whole blocks\n", size); return 2; }
    const size_t n = size / fmt->bytes * fmt->block;
    float* out = malloc(n ? n * sizeof(float) : 1);
    fmt->dequantize(in, out, (int64_t)n);
    write_file(argv[4], out, n * sizeof(float));
  } else {
    fprintf(stderr, "ggml_quants_check: unknown command %s\n", argv[1]);
    return 2;
  }
  return 0;
}
