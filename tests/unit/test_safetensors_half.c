/* test_safetensors_half.c: F16 and BF16 in safetensors files (runtime/
 * safetensors.h), and st_load's conversions and refusals.
 *
 * Against PyTorch (/usr/bin/python3; a missing torch fails the test): BF16
 * and F16 tensors torch wrote load into fp32 equal, bit for bit, to torch's
 * own .float() of them; the BF16 and F16 that fusion writes from fp32 are
 * torch's .to(bfloat16) / .to(float16) of the same fp32 values, bit for bit
 * (NaN only as NaN: torch's vectorised bf16 rounding makes 0xffff of any NaN,
 * its scalar one 0x7fc0).  Without torch: the exact bytes of a small BF16 /
 * F16 file, round trips through every pair of float dtypes equal to half.h's
 * rounding, and the messages for unsupported dtypes, wrong data lengths,
 * shapes and conversions, with the caller's memory left as it was.
 * Container basics (header, truncation, flips): test_safetensors.c.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cpu/half.h"
#include "safetensors.h"
#include "safetensors_test_files.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* found[0..n) (fp32) against expected, bit for bit (a NaN only as a NaN);
 * prints the first difference and where.  1 when all agree. */
static int same_f32(const char *what, const float *expected, const float *found, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int ok = isnan(expected[i]) ? isnan(found[i]) != 0 : bits(expected[i]) == bits(found[i]);
        if (!ok) {
            fprintf(stderr, "  %s: element %lld: expected %.9g (0x%08x), found %.9g (0x%08x)\n", what, (long long)i,
                    (double)expected[i], bits(expected[i]), (double)found[i], bits(found[i]));
            return 0;
        }
    }
    return 1;
}

/* 16-bit values of dtype (HALF_DT_BF16 or HALF_DT_F16), as same_f32. */
static int same_u16(const char *what, const uint16_t *expected, const uint16_t *found, int64_t n, int dtype)
{
    for (int64_t i = 0; i < n; i++) {
        float e = dtype == HALF_DT_BF16 ? bf16_to_f32(expected[i]) : fp16_to_f32(expected[i]);
        float f = dtype == HALF_DT_BF16 ? bf16_to_f32(found[i]) : fp16_to_f32(found[i]);
        int ok = isnan(e) ? isnan(f) != 0 : expected[i] == found[i];
        if (!ok) {
            fprintf(stderr, "  %s: element %lld: expected 0x%04x, found 0x%04x\n", what, (long long)i, expected[i],
                    found[i]);
            return 0;
        }
    }
    return 1;
}

/* The fp32 values the conversions are tried on: the edges of both formats
 * (zeros, infinities, NaN, fp16's largest finite and its overflow boundary,
 * fp16 subnormals and the halfway points below them, bf16 and fp16 ties to
 * even either way), then pseudo-random bits over exponents 2^-30 .. 2^20. */
#define N_VALUES 4096
static float values[N_VALUES];

static void make_values(void)
{
    static const uint32_t edges[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f7fffffu,
        0x00000001u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, /* bf16: ties down and up, either side */
        0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u,              /* fp16: the same */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc77ff000u,              /* 65504, just under 65520, 65520 (inf) */
        0x33800000u, 0x33000000u, 0x33000001u, 0x32ffffffu, /* 2^-24, 2^-25 (tie to 0), just over, just under */
        0x33c00000u, 0x34200000u, 0x387fc000u, 0x38800000u, /* 1.5 * 2^-24 (tie), 2.5 * 2^-24, subnormal top */
        0x3dcccccdu, 0xbf8ccccdu, 0x40490fdbu, 0x4b800001u, /* 0.1, -1.1, pi, 2^24 + 2 */
    };
    int n = (int)(sizeof edges / sizeof edges[0]);
    for (int i = 0; i < n; i++)
        values[i] = from_bits(edges[i]);
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    for (int i = n; i < N_VALUES; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng >> 32);
        uint32_t exp = 97u + (r >> 8) % 51u; /* 2^-30 .. 2^20 */
        values[i] = from_bits((r & 0x80000000u) | exp << 23 | ((uint32_t)(rng >> 9) & 0x7fffffu));
    }
}

/* The exact file: BF16 and F16 from fp32 memory, I32 as it is; and st_write
 * with every file dtype given as the tensor's own writes what st_write does. */
static void test_half_write_exact_bytes(void)
{
    float a[2] = { 1.0f, -2.0f };
    float c = 0.1f; /* rounds: bf16 0x3dcd, fp16 0x2e66 */
    int32_t b = 7;
    st_tensor t[] = {
        { .name = "a", .dtype = ST_F32, .rank = 1, .dim = { 2 }, .data = a },
        { .name = "b", .dtype = ST_I32, .rank = 0, .data = &b },
        { .name = "c", .dtype = ST_F32, .rank = 0, .data = &c },
    };
    const st_dtype as[] = { ST_BF16, ST_I32, ST_F16 };
    static const char expected[] = "\xa0\0\0\0\0\0\0\0" /* 160 bytes of JSON, a multiple of 8: no spaces */
                                   "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                                   "\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]},"
                                   "\"c\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[8,10]}}"
                                   "\x80\x3f"
                                   "\x00\xc0"         /* 1.0, -2.0 in bf16 */
                                   "\x07\x00\x00\x00" /* 7 */
                                   "\x66\x2e";        /* 0.1 in fp16 */
    char err[512] = "";
    const char *path = in_dir("exact-half.safetensors");
    CHECK_INT(0, st_write_as(path, t, 3, as, NULL, err, sizeof err));
    CHECK_STR("", err);
    check_file_bytes(path, expected, sizeof expected - 1);

    /* Each tensor in its own dtype: byte for byte what st_write writes. */
    const st_dtype own[] = { ST_F32, ST_I32, ST_F32 };
    const char *p1 = in_dir("plain.safetensors"), *p2 = in_dir("plain-as.safetensors");
    CHECK_INT(0, st_write(p1, t, 3, NULL, err, sizeof err));
    CHECK_INT(0, st_write_as(p2, t, 3, own, NULL, err, sizeof err));
    size_t n1 = 0, n2 = 0;
    unsigned char *b1 = read_bytes(p1, &n1), *b2 = read_bytes(p2, &n2);
    CHECK_INT(n1, n2);
    CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
}

/* fp32 -> BF16/F16 file -> fp32 is half_round_f32; the file holds
 * f32_to_bf16 / f32_to_fp16 of each value; and st_load converts every float
 * file dtype into every float target dtype as half.h does (16-bit <-> 16-bit
 * through the exact fp32). */
static void test_half_roundtrip_equals_half_round(void)
{
    st_tensor t[] = {
        { .name = "f32", .dtype = ST_F32, .rank = 2, .dim = { 64, N_VALUES / 64 }, .data = values },
        { .name = "bf16", .dtype = ST_F32, .rank = 2, .dim = { 64, N_VALUES / 64 }, .data = values },
        { .name = "f16", .dtype = ST_F32, .rank = 2, .dim = { 64, N_VALUES / 64 }, .data = values },
    };
    const st_dtype as[] = { ST_F32, ST_BF16, ST_F16 };
    char err[512] = "";
    const char *path = in_dir("roundtrip-half.safetensors");
    CHECK_INT(0, st_write_as(path, t, 3, as, NULL, err, sizeof err));
    CHECK_STR("", err);
    st_file *f = st_open(path, err, sizeof err);
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "  st_open: %s\n", err);
        return;
    }

    static float want_bf16_f32[N_VALUES], want_f16_f32[N_VALUES], got[N_VALUES];
    static uint16_t want_bf16[N_VALUES], want_f16[N_VALUES], want_bf16_as_f16[N_VALUES], want_f16_as_bf16[N_VALUES],
        got16[N_VALUES];
    memcpy(want_bf16_f32, values, sizeof values);
    memcpy(want_f16_f32, values, sizeof values);
    half_round_f32(want_bf16_f32, N_VALUES, HALF_DT_BF16);
    half_round_f32(want_f16_f32, N_VALUES, HALF_DT_F16);
    for (int i = 0; i < N_VALUES; i++) {
        want_bf16[i] = f32_to_bf16(values[i]);
        want_f16[i] = f32_to_fp16(values[i]);
        want_bf16_as_f16[i] = f32_to_fp16(bf16_to_f32(want_bf16[i]));
        want_f16_as_bf16[i] = f32_to_bf16(fp16_to_f32(want_f16[i]));
    }

    /* The file's bytes, as st_find gives them. */
    st_tensor raw;
    CHECK_INT(1, st_find(f, "bf16", &raw));
    CHECK_INT(ST_BF16, raw.dtype);
    CHECK_INT(2, raw.rank);
    CHECK_INT(64, raw.dim[0]);
    CHECK(same_u16("bf16 bytes in the file", want_bf16, raw.data, N_VALUES, HALF_DT_BF16));
    CHECK_INT(1, st_find(f, "f16", &raw));
    CHECK_INT(ST_F16, raw.dtype);
    CHECK(same_u16("f16 bytes in the file", want_f16, raw.data, N_VALUES, HALF_DT_F16));

    /* Every (file dtype, target dtype) pair of floats. */
    struct {
        const char *name;
        st_dtype to;
        const void *want;
        int want_dtype; /* -1 fp32 */
    } cases[] = {
        { "f32", ST_F32, values, -1 },
        { "bf16", ST_F32, want_bf16_f32, -1 },
        { "f16", ST_F32, want_f16_f32, -1 },
        { "f32", ST_BF16, want_bf16, HALF_DT_BF16 },
        { "f32", ST_F16, want_f16, HALF_DT_F16 },
        { "bf16", ST_BF16, want_bf16, HALF_DT_BF16 },
        { "f16", ST_F16, want_f16, HALF_DT_F16 },
        { "bf16", ST_F16, want_bf16_as_f16, HALF_DT_F16 },
        { "f16", ST_BF16, want_f16_as_bf16, HALF_DT_BF16 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        void *dst = cases[c].want_dtype < 0 ? (void *)got : (void *)got16;
        memset(dst, 0xab, cases[c].want_dtype < 0 ? sizeof got : sizeof got16);
        st_target tg = {
            .name = cases[c].name, .dtype = cases[c].to, .rank = 2, .dim = { 64, N_VALUES / 64 }, .dst = dst
        };
        err[0] = '\0';
        CHECK_INT(0, st_load(f, &tg, 1, err, sizeof err));
        CHECK_STR("", err);
        char what[64];
        snprintf(what, sizeof what, "%s loaded as %s", cases[c].name, st_dtype_name(cases[c].to));
        if (cases[c].want_dtype < 0)
            CHECK(same_f32(what, cases[c].want, got, N_VALUES));
        else
            CHECK(same_u16(what, cases[c].want, got16, N_VALUES, cases[c].want_dtype));
    }
    st_close(f);

    /* Data held in bf16 in memory, written as F32 and as BF16 (as it is). */
    st_tensor h[] = {
        { .name = "w", .dtype = ST_BF16, .rank = 1, .dim = { N_VALUES }, .data = want_bf16 },
        { .name = "w16", .dtype = ST_BF16, .rank = 1, .dim = { N_VALUES }, .data = want_bf16 },
    };
    const st_dtype has[] = { ST_F32, ST_BF16 };
    path = in_dir("from-bf16.safetensors");
    CHECK_INT(0, st_write_as(path, h, 2, has, NULL, err, sizeof err));
    f = st_open(path, err, sizeof err);
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_INT(1, st_find(f, "w", &raw));
    CHECK_INT(ST_F32, raw.dtype);
    CHECK(same_f32("bf16 memory written as F32", want_bf16_f32, raw.data, N_VALUES));
    CHECK_INT(1, st_find(f, "w16", &raw));
    CHECK_INT(ST_BF16, raw.dtype);
    CHECK(raw.data && memcmp(raw.data, want_bf16, sizeof want_bf16) == 0);
    st_close(f);
}

/* Dtypes fusion does not read, conversions it does not make, other shapes,
 * absent names: each a message naming the file and the tensor, and nothing
 * written, not even the targets before the bad one. */
static void test_load_refuses_and_leaves_memory_alone(void)
{
    const char *path = in_dir("other-dtypes.safetensors");
    write_raw(path,
              "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
              "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]},"
              "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[16,18]},"
              "\"f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[18,20]},"
              "\"n\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[20,24]},"
              "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[24,28]}}",
              28);
    char err[512] = "";
    st_file *f = st_open(path, err, sizeof err); /* the file opens: only asking for them fails */
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "  st_open: %s\n", err);
        return;
    }
    st_tensor got;
    CHECK_INT(-1, st_find(f, "d", &got));
    CHECK_INT(-1, st_find(f, "f8", &got));

    float w[4], one[2];
    int32_t n1;
    static const struct {
        const char *what, *name;
        st_dtype dtype;
        int rank;
        int64_t dim0, dim1;
        const char *message;
    } cases[] = {
        { "F64", "d", ST_F32, 1, 1, 0, "tensor 'd': dtype F64 is not supported (fusion reads F32, F16, BF16, I32)" },
        { "I8", "i8", ST_F32, 1, 2, 0, "tensor 'i8': dtype I8 is not supported (fusion reads F32, F16, BF16, I32)" },
        { "F8_E4M3", "f8", ST_BF16, 1, 2, 0, "tensor 'f8': dtype F8_E4M3 is not supported" },
        { "I32 as F32", "n", ST_F32, 1, 1, 0, "tensor 'n': I32 in the file does not load as F32" },
        { "F32 as I32", "x", ST_I32, 1, 1, 0, "tensor 'x': F32 in the file does not load as I32" },
        { "another shape", "x", ST_F32, 2, 1, 1, "tensor 'x': shape [1] in the file, [1,1] wanted" },
        { "another dim", "w", ST_F32, 2, 4, 1, "tensor 'w': shape [2,2] in the file, [4,1] wanted" },
        { "absent", "nope", ST_F32, 1, 1, 0, "has no tensor 'nope'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int k = 0; k < 4; k++)
            w[k] = -7.0f;
        one[0] = one[1] = -7.0f;
        n1 = -7;
        st_target tg[2] = {
            { .name = "w", .dtype = ST_F32, .rank = 2, .dim = { 2, 2 }, .dst = w }, /* fine by itself */
            { .name = cases[i].name,
              .dtype = cases[i].dtype,
              .rank = cases[i].rank,
              .dim = { cases[i].dim0, cases[i].dim1 },
              .dst = cases[i].dtype == ST_I32 ? (void *)&n1 : (void *)one },
        };
        err[0] = '\0';
        int rc = st_load(f, tg, 2, err, sizeof err);
        if (rc != -1 || !strstr(err, cases[i].message))
            fprintf(stderr, "  case '%s':\n", cases[i].what);
        CHECK_INT(-1, rc);
        CHECK_CONTAINS(err, cases[i].message);
        CHECK(strncmp(err, path, strlen(path)) == 0); /* the message starts with the path */
        for (int k = 0; k < 4; k++)
            CHECK_NEAR(-7.0f, w[k], 0); /* the good target before it: not written */
        CHECK_NEAR(-7.0f, one[0], 0);
        CHECK_NEAR(-7.0f, one[1], 0);
        CHECK_INT(-7, n1);
    }

    /* The good ones together load. */
    st_target ok[2] = {
        { .name = "w", .dtype = ST_F32, .rank = 2, .dim = { 2, 2 }, .dst = w },
        { .name = "n", .dtype = ST_I32, .rank = 1, .dim = { 1 }, .dst = &n1 },
    };
    CHECK_INT(0, st_load(f, ok, 2, err, sizeof err));
    CHECK_NEAR(bf16_to_f32(0x0100), w[0], 0); /* data bytes 0, 1, 2, ...: bf16 0x0100, 0x0302, ... */
    CHECK_NEAR(bf16_to_f32(0x0706), w[3], 0);
    CHECK_INT(0x17161514, n1);
    st_close(f);

    /* A dtype the format does not define, and data that does not fit the
     * dtype's size times the shape: st_open refuses the file. */
    static const struct {
        const char *what, *header;
        size_t data_len;
        const char *message;
    } bad[] = {
        { "garbage dtype", "{\"w\":{\"dtype\":\"BF17\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
          "tensor 'w': unknown dtype \"BF17\" (not a safetensors dtype; fusion reads F32, F16, BF16, I32)" },
        { "BF16 short", "{\"h.0.w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,10]}}", 10,
          "tensor 'h.0.w': data_offsets [0, 10) hold 10 bytes but BF16 [2,3] needs 12" },
        { "F16 with F32's length", "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,12]}}", 12,
          "tensor 'h': data_offsets [0, 12) hold 12 bytes but F16 [3] needs 6" },
        { "F64 short", "{\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
          "tensor 'd': data_offsets [0, 8) hold 8 bytes but F64 [2] needs 16" },
    };
    const char *bad_path = in_dir("bad-half.safetensors");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_raw(bad_path, bad[i].header, bad[i].data_len);
        err[0] = '\0';
        st_file *g = st_open(bad_path, err, sizeof err);
        if (g || !strstr(err, bad[i].message))
            fprintf(stderr, "  case '%s':\n", bad[i].what);
        CHECK(g == NULL);
        CHECK_CONTAINS(err, bad[i].message);
        CHECK_CONTAINS(err, bad_path);
        st_close(g);
    }

    /* The writer: conversions it does not make, dtypes that are none. */
    float v = 1.0f;
    int32_t iv = 1;
    const char *wpath = in_dir("bad-write.safetensors");
    st_tensor ti = { .name = "i", .dtype = ST_I32, .rank = 0, .data = &iv };
    st_tensor tf = { .name = "f", .dtype = ST_F32, .rank = 0, .data = &v };
    const st_dtype to_bf16 = ST_BF16, to_i32 = ST_I32, to_bad = (st_dtype)9;
    CHECK_INT(-1, st_write_as(wpath, &ti, 1, &to_bf16, NULL, err, sizeof err));
    CHECK_CONTAINS(err, "tensor 'i': I32 data cannot be written as BF16");
    CHECK_INT(-1, st_write_as(wpath, &tf, 1, &to_i32, NULL, err, sizeof err));
    CHECK_CONTAINS(err, "tensor 'f': F32 data cannot be written as I32");
    CHECK_INT(-1, st_write_as(wpath, &tf, 1, &to_bad, NULL, err, sizeof err));
    CHECK_CONTAINS(err, "tensor 'f': file dtype 9 is none of ST_F32, ST_I32, ST_F16, ST_BF16");
    CHECK(access(wpath, F_OK) != 0);
}

/* Python's side.  "write PATH": BF16 and F16 tensors as torch makes them
 * (behind a U8, so misaligned), each beside its .float() in F32.  "check
 * PATH": fusion's BF16 and F16 of the F32 "x" must be torch's .to() of it. */
static const char torch_script[] =
    "import json, struct, sys\n"
    "try:\n"
    "    import torch\n"
    "except ImportError as e:\n"
    "    print(f'python3-torch is missing: /usr/bin/python3 cannot import torch ({e})', file=sys.stderr)\n"
    "    sys.exit(3)\n"
    "def fail(msg):\n"
    "    print(f'python: {msg}', file=sys.stderr)\n"
    "    sys.exit(1)\n"
    "names = {torch.uint8: 'U8', torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16'}\n"
    "dtypes = {v: k for k, v in names.items()}\n"
    "def raw(t):\n"
    "    return t.view(torch.int16).numpy().tobytes() if t.element_size() == 2 else t.numpy().tobytes()\n"
    "if sys.argv[1] == 'write':\n"
    "    torch.manual_seed(0)\n"
    "    b = torch.randn(15) * 3\n"
    "    b[:6] = torch.tensor([float('inf'), float('-inf'), -0.0, float('nan'), 1e-40, 3.0e38])\n"
    "    h = torch.randn(15) * 100\n"
    "    h[:6] = torch.tensor([65504.0, 70000.0, 1e-7, -6e-8, float('nan'), float('-inf')])\n"
    "    b, h = b.reshape(3, 5).to(torch.bfloat16), h.reshape(5, 3).to(torch.float16)\n"
    "    s = torch.tensor(0.1).to(torch.bfloat16)\n"
    "    tensors = {'u8': torch.tensor([9], dtype=torch.uint8), 'b': b, 'h': h, 's': s,\n"
    "               'b_f32': b.float(), 'h_f32': h.float(), 's_f32': s.float()}\n"
    "    header = {'__metadata__': {'format': 'pt'}}\n"
    "    blob = b''\n"
    "    for name, t in tensors.items():\n"
    "        r = raw(t)\n"
    "        header[name] = {'dtype': names[t.dtype], 'shape': list(t.shape),\n"
    "                        'data_offsets': [len(blob), len(blob) + len(r)]}\n"
    "        blob += r\n"
    "    text = json.dumps(header, separators=(',', ':')).encode()\n"
    "    with open(sys.argv[2], 'wb') as f:\n"
    "        f.write(struct.pack('<Q', len(text)) + text + blob)\n"
    "    sys.exit(0)\n"
    "data = open(sys.argv[2], 'rb').read()\n"
    "(n,) = struct.unpack('<Q', data[:8])\n"
    "hdr = json.loads(data[8:8 + n].decode('utf-8'))\n"
    "blob = bytearray(data[8 + n:])\n"
    "def load(name):\n"
    "    e = hdr[name]\n"
    "    b, end = e['data_offsets']\n"
    "    return torch.frombuffer(blob[b:end], dtype=dtypes[e['dtype']]).reshape(e['shape'])\n"
    "for name, dt in (('x', 'F32'), ('xb', 'BF16'), ('xh', 'F16')):\n"
    "    if hdr[name]['dtype'] != dt or hdr[name]['shape'] != [64, 64]:\n"
    "        fail(f'{name}: header {hdr[name]}, expected dtype {dt} and shape [64, 64]')\n"
    "x = load('x')\n"
    "for name, dt in (('xb', torch.bfloat16), ('xh', torch.float16)):\n"
    "    got, want = load(name), x.to(dt)\n"
    "    nan = torch.isnan(want)\n"
    "    if not torch.equal(torch.isnan(got), nan):\n"
    "        fail(f'{name}: NaNs where torch has none, or none where it has')\n"
    "    g, w = got.view(torch.int16)[~nan], want.view(torch.int16)[~nan]\n"
    "    if not torch.equal(g, w):\n"
    "        i = int((g != w).nonzero()[0])\n"
    "        xs = x[~nan]\n"
    "        fail(f'{name}: at (non-NaN) element {i}: x = {xs[i].item()!r}: torch 0x{int(w[i]) & 0xffff:04x}, '\n"
    "             f'fusion 0x{int(g[i]) & 0xffff:04x}')\n"
    "    if not torch.equal(got.float()[~nan], want.float()[~nan]):\n"
    "        fail(f'{name}: .float() differs')\n"
    "print(f'torch {torch.__version__}: {int(x.numel())} values, BF16 and F16 as torch rounds them')\n";

/* Runs the script with mode and path; its exit code (3: no torch). */
static int run_torch(const char *script, const char *mode, const char *path)
{
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s '%s'", script, mode, path);
    int status = system(cmd);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 3 || code == 127)
        fprintf(stderr, "FAIL: python3-torch is missing: /usr/bin/python3 cannot import torch "
                        "(install Debian's python3-torch; scripts/install-deps.sh)\n");
    return code;
}

static void test_torch_half_files_both_ways(void)
{
    const char *script = in_dir("torch_half.py");
    write_bytes(script, torch_script, sizeof torch_script - 1);

    /* Theirs: BF16 and F16 into fp32 equal torch's .float() bit for bit. */
    const char *theirs = in_dir("torch-half.safetensors");
    int code = run_torch(script, "write", theirs);
    CHECK_INT(0, code);
    char err[512] = "";
    st_file *f = code == 0 ? st_open(theirs, err, sizeof err) : NULL;
    CHECK(f != NULL);
    if (f) {
        static const struct {
            const char *name, *as_f32;
            int rank;
            int64_t dim0, dim1;
            st_dtype dtype;
        } pairs[] = {
            { "b", "b_f32", 2, 3, 5, ST_BF16 },
            { "h", "h_f32", 2, 5, 3, ST_F16 },
            { "s", "s_f32", 0, 0, 0, ST_BF16 },
        };
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
            float got[15], want[15];
            memset(got, 0xab, sizeof got);
            st_tensor t;
            CHECK_INT(1, st_find(f, pairs[i].name, &t));
            CHECK_INT(pairs[i].dtype, t.dtype);
            st_target tg[2] = {
                { .name = pairs[i].name,
                  .dtype = ST_F32,
                  .rank = pairs[i].rank,
                  .dim = { pairs[i].dim0, pairs[i].dim1 },
                  .dst = got },
                { .name = pairs[i].as_f32,
                  .dtype = ST_F32,
                  .rank = pairs[i].rank,
                  .dim = { pairs[i].dim0, pairs[i].dim1 },
                  .dst = want },
            };
            err[0] = '\0';
            CHECK_INT(0, st_load(f, tg, 2, err, sizeof err));
            CHECK_STR("", err);
            int64_t n = pairs[i].rank ? pairs[i].dim0 * pairs[i].dim1 : 1;
            char what[64];
            snprintf(what, sizeof what, "torch's %s loaded as F32 vs its .float()", pairs[i].name);
            CHECK(memcmp(got, want, (size_t)n * 4) == 0); /* NaN included: bit for bit */
            CHECK(same_f32(what, want, got, n));
        }
        float s = 0;
        st_target ts = { .name = "s", .dtype = ST_F32, .rank = 0, .dst = &s };
        CHECK_INT(0, st_load(f, &ts, 1, err, sizeof err));
        CHECK_NEAR(0.10009765625, s, 0); /* bf16 0x3dcd */
        st_close(f);
    } else if (code == 0) {
        fprintf(stderr, "  st_open: %s\n", err);
    }

    /* Ours: fusion's BF16 and F16 of fp32 values are torch's .to() of them. */
    st_tensor t[] = {
        { .name = "x", .dtype = ST_F32, .rank = 2, .dim = { 64, 64 }, .data = values },
        { .name = "xb", .dtype = ST_F32, .rank = 2, .dim = { 64, 64 }, .data = values },
        { .name = "xh", .dtype = ST_F32, .rank = 2, .dim = { 64, 64 }, .data = values },
    };
    const st_dtype as[] = { ST_F32, ST_BF16, ST_F16 };
    const char *ours = in_dir("ours-half.safetensors");
    CHECK_INT(0, st_write_as(ours, t, 3, as, NULL, err, sizeof err));
    CHECK_INT(0, run_torch(script, "check", ours));
}

int main(void)
{
    if (scratch_dir_make("fusion-safetensors-half"))
        return 1;
    make_values();
    test_half_write_exact_bytes();
    test_half_roundtrip_equals_half_round();
    test_load_refuses_and_leaves_memory_alone();
    test_torch_half_files_both_ways();

    scratch_dir_remove();
    CHECK_DONE();
}
