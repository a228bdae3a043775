/* test_data_util.c — the data layer's building blocks: SHA-256 against the FIPS 180-4
 * example vectors, the streaming tar.gz reader on generated archives (ustar prefix, GNU long
 * names, pax paths, corrupt and truncated streams), and the crop-and-resize resampler on
 * images with known answers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/archive.h"
#include "data/fixtures.h"
#include "data/resample.h"
#include "data/sha256.h"
#include "mpx/fsutil.h"
#include "mpx/runtime.h"
#include "testutil.h"

static void test_sha256(void) {
    static const struct {
        const char *msg, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        mpx_sha256 s;
        char hex[65];
        mpx_sha256_init(&s);
        mpx_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        mpx_sha256_final_hex(&s, hex);
        CHECK(strcmp(hex, v[i].hex) == 0, "sha256('%s') = %s, want %s", v[i].msg, hex, v[i].hex);
    }
    /* One million 'a', fed in uneven pieces (exercises the partial-block path). */
    mpx_sha256 s;
    char hex[65], chunk[997];
    memset(chunk, 'a', sizeof chunk);
    mpx_sha256_init(&s);
    size_t left = 1000000;
    for (size_t k = 1; left; k = k % 997 + 1) {
        size_t t = k < left ? k : left;
        mpx_sha256_update(&s, chunk, t);
        left -= t;
    }
    mpx_sha256_final_hex(&s, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
          "sha256(10^6 'a') = %s", hex);
    const char *manifest =
        "0123456789012345678901234567890123456789012345678901234567890123  a.bin\n"
        "ABCDEF6789012345678901234567890123456789012345678901234567890123 *b.bin\n";
    CHECK(mpx_sha256_manifest_lookup(manifest, "b.bin", hex) && strncmp(hex, "abcdef", 6) == 0,
          "manifest lookup of a binary-mode line");
    CHECK(!mpx_sha256_manifest_lookup(manifest, "c.bin", hex), "manifest lookup of a missing name");
}

/* A header block written by hand (used for the GNU 'L' and pax 'x' records). */
static void raw_header(gzFile gz, const char *name, char type, size_t size, const char *magic) {
    char h[512] = {0};
    snprintf(h, 100, "%s", name);
    snprintf(h + 100, 8, "%07o", 0644);
    snprintf(h + 124, 12, "%011o", (unsigned)size);
    h[156] = type;
    memcpy(h + 257, magic, 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    gzwrite(gz, h, 512);
}

static void pad_data(gzFile gz, const void *data, size_t n) {
    char zero[512] = {0};
    gzwrite(gz, data, (unsigned)n);
    if (n % 512) gzwrite(gz, zero, (unsigned)(512 - n % 512));
}

static void test_tar(const char *tmp) {
    char path[1200], longdir[300], longname[300], paxname[300];
    snprintf(path, sizeof path, "%s/t.tar.gz", tmp);
    /* a deep path (ustar prefix), a long file name (GNU 'L'), a pax path */
    snprintf(longdir, sizeof longdir, "./top/%0120d/leaf.txt", 7);
    snprintf(longname, sizeof longname, "gnu/%0150d.txt", 3);
    snprintf(paxname, sizeof paxname, "pax/%0130d.txt", 5);
    gzFile gz = gzopen(path, "wb");
    fx_tar_add(gz, "top/", '5', NULL, 0);
    fx_tar_add(gz, longdir, '0', "hello", 5);
    raw_header(gz, "././@LongLink", 'L', strlen(longname) + 1, "ustar  ");
    pad_data(gz, longname, strlen(longname) + 1);
    raw_header(gz, "gnu/truncated-name", '0', 600, "ustar  ");
    char big[600];
    for (int i = 0; i < 600; i++) big[i] = (char)(i * 7);
    pad_data(gz, big, 600);
    char rec[400];
    int reclen = (int)strlen(paxname) + 7; /* " path=" + name + "\n" plus the length digits */
    reclen += snprintf(NULL, 0, "%d", reclen + 3);
    snprintf(rec, sizeof rec, "%d path=%s\n", reclen, paxname);
    raw_header(gz, "PaxHeader", 'x', strlen(rec), "ustar\00000");
    pad_data(gz, rec, strlen(rec));
    raw_header(gz, "pax/short.txt", '0', 3, "ustar\00000");
    pad_data(gz, "xyz", 3);
    fx_tar_end(gz);
    gzclose(gz);

    const char *want_names[] = {"top/", longdir + 2, longname, paxname};
    const char want_types[] = {'5', '0', '0', '0'};
    const int64_t want_sizes[] = {0, 5, 600, 3};
    mpx_archive *t;
    CHECK_OK(mpx_archive_open(path, &t));
    if (!t) return;
    for (int k = 0;; k++) {
        mpx_archive_entry e;
        int done;
        mpx_status st = mpx_archive_next(t, &e, &done);
        CHECK(st == MPX_OK, "tar entry %d: %s", k, mpx_error_message());
        if (st != MPX_OK || done) {
            CHECK(k == 4, "tar ended after %d entries, want 4", k);
            break;
        }
        if (k >= 4) {
            CHECK(0, "unexpected extra entry '%s'", e.name);
            break;
        }
        CHECK(strcmp(e.name, want_names[k]) == 0, "entry %d name '%s', want '%s'", k, e.name,
              want_names[k]);
        CHECK(e.type == want_types[k] && e.size == want_sizes[k], "entry %d type %c size %lld", k,
              e.type, (long long)e.size);
        if (k == 2) { /* read the 600 bytes; others are skipped by mpx_archive_next */
            char got[600];
            CHECK_OK(mpx_archive_read(t, got, 600));
            CHECK(memcmp(got, big, 600) == 0, "entry data differs");
        }
    }
    mpx_archive_close(t);

    /* Truncated gzip stream: cut the file in the middle of the data. */
    char *bytes;
    size_t n;
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    bytes = malloc(n);
    CHECK(fread(bytes, 1, n, f) == n, "read back");
    fclose(f);
    char cut[1200];
    snprintf(cut, sizeof cut, "%s/cut.tar.gz", tmp);
    fx_write_file(cut, bytes, n / 2);
    /* (libarchive reads ahead: the damage may show when the archive is opened) */
    mpx_status st = mpx_archive_open(cut, &t);
    for (int k = 0; k < 10 && st == MPX_OK; k++) {
        mpx_archive_entry e;
        int done;
        st = mpx_archive_next(t, &e, &done);
        if (done) break;
    }
    mpx_archive_close(t);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "cut.tar.gz"),
          "truncated archive -> %s: %s", mpx_status_name(st), mpx_error_message());
    free(bytes);

    /* A plain tar whose first header checksum is wrong. */
    char bad[1200];
    snprintf(bad, sizeof bad, "%s/bad.tar", tmp);
    gz = gzopen(bad, "wT"); /* "T": write without compression */
    fx_tar_add(gz, "a.txt", '0', "abc", 3);
    fx_tar_end(gz);
    gzclose(gz);
    f = fopen(bad, "r+b");
    fseek(f, 0, SEEK_SET);
    fputc('b', f); /* rename a.txt -> b.txt without fixing the checksum */
    fclose(f);
    st = mpx_archive_open(bad, &t);
    mpx_archive_entry e;
    int done = 0;
    if (st == MPX_OK) st = mpx_archive_next(t, &e, &done);
    mpx_archive_close(t);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "bad.tar") &&
              strstr(mpx_error_message(), "damaged"),
          "bad checksum -> %s: %s", mpx_status_name(st), mpx_error_message());
}

static void test_resample(void) {
    mpx_resample_scratch s = {0};
    enum { H = 9, W = 12, C = 2 };
    uint8_t img[H * W * C];
    float out[32 * 32 * C];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++)
                img[(y * W + x) * C + c] = (uint8_t)(y * 20 + x * 7 + c * 3);

    /* Identity: the box is the whole image at its own size -> every pixel exactly. */
    CHECK_OK(mpx_resample_box(img, H, W, C, 0, 0, W, H, out, H, W, 0, &s));
    int bad = 0;
    for (int i = 0; i < H * W * C; i++) bad += out[i] != img[i];
    CHECK(bad == 0, "identity resample: %d pixels differ", bad);

    /* Flip: out(y, x) = img(y, W-1-x). */
    CHECK_OK(mpx_resample_box(img, H, W, C, 0, 0, W, H, out, H, W, 1, &s));
    bad = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++)
                bad += out[(y * W + x) * C + c] != img[(y * W + (W - 1 - x)) * C + c];
    CHECK(bad == 0, "flipped identity: %d pixels differ", bad);

    /* Integer crop at scale 1: out(y, x) = img(y + 2, x + 3). */
    CHECK_OK(mpx_resample_box(img, H, W, C, 3, 2, 5, 4, out, 4, 5, 0, &s));
    bad = 0;
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++)
            for (int c = 0; c < C; c++)
                bad += out[(y * 5 + x) * C + c] != img[((y + 2) * W + x + 3) * C + c];
    CHECK(bad == 0, "crop at scale 1: %d pixels differ", bad);

    /* Upscaling a linear ramp is exact bilinear interpolation away from the border: the value
     * at output centre u is the ramp evaluated at source position (u + 0.5) * scale - 0.5.
     * Tolerance 1e-3: float weights (rel. error ~1e-7) times values < 256. */
    CHECK_OK(mpx_resample_box(img, H, W, C, 0, 0, W, H, out, 27, 32, 0, &s));
    double worst = 0;
    for (int i = 2; i < 25; i++)
        for (int j = 3; j < 29; j++) {
            double sy = (i + 0.5) * H / 27.0 - 0.5, sx = (j + 0.5) * W / 32.0 - 0.5;
            if (sy < 0 || sy > H - 1 || sx < 0 || sx > W - 1) continue;
            for (int c = 0; c < C; c++) {
                double want = sy * 20 + sx * 7 + c * 3;
                double e = fabs(out[(i * 32 + j) * C + c] - want);
                worst = e > worst ? e : worst;
            }
        }
    CHECK(worst < 1e-3, "bilinear upscale of a ramp: max error %g", worst);

    /* Antialiasing: a 1-pixel checkerboard (values 40/200) halved must come out as its mean
     * (120) in the interior; plain 2-tap bilinear sampling would return 40 or 200. */
    enum { N = 16 };
    uint8_t cb[N * N];
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) cb[y * N + x] = ((x + y) & 1) ? 200 : 40;
    CHECK_OK(mpx_resample_box(cb, N, N, 1, 0, 0, N, N, out, N / 2, N / 2, 0, &s));
    worst = 0;
    for (int i = 1; i < N / 2 - 1; i++)
        for (int j = 1; j < N / 2 - 1; j++) {
            double e = fabs(out[i * (N / 2) + j] - 120.0);
            worst = e > worst ? e : worst;
        }
    CHECK(worst < 1e-3, "2x downscale of a checkerboard: max deviation from the mean %g", worst);

    /* Antialiasing at 3x: vertical stripes (40/200 by column parity) shrunk 3x in width. The
     * triangle filter stretched to radius 3 weights the pixels at distance 0, 1, 2 from the
     * output centre by 1, 2/3, 1/3: out = (5 v(3j+1) + 4 v(3j)) / 9 in the interior, where a
     * plain 2-tap bilinear sample would return v(3j+1) (40 or 200) alone. */
    enum { SW = 30, SH = 4 };
    uint8_t st[SH * SW];
    for (int y = 0; y < SH; y++)
        for (int x = 0; x < SW; x++) st[y * SW + x] = (x & 1) ? 200 : 40;
    CHECK_OK(mpx_resample_box(st, SH, SW, 1, 0, 0, SW, SH, out, SH, SW / 3, 0, &s));
    worst = 0;
    for (int y = 0; y < SH; y++)
        for (int j = 1; j < SW / 3 - 1; j++) {
            double want = (5.0 * st[3 * j + 1] + 4.0 * st[3 * j]) / 9.0;
            worst = fmax(worst, fabs(out[y * (SW / 3) + j] - want));
        }
    CHECK(worst < 1e-3, "3x downscale of stripes: max error %g", worst);

    /* A constant image stays constant under any box and scale (weights are normalised). */
    uint8_t flat[7 * 5 * 3];
    memset(flat, 77, sizeof flat);
    CHECK_OK(mpx_resample_box(flat, 7, 5, 3, 0.3, 1.1, 4.2, 5.7, out, 13, 3, 1, &s));
    worst = 0;
    for (int i = 0; i < 13 * 3 * 3; i++) worst = fmax(worst, fabs(out[i] - 77.0));
    CHECK(worst < 1e-3, "constant image: max deviation %g", worst);
    mpx_resample_scratch_free(&s);
}

/* The data roots: the environment overrides the source tree (resolved once per process). */
static void test_data_roots(const char *tmp) {
    setenv("MPX_SHARED_DATA", tmp, 1);
    unsetenv("MPX_CACHE_DIR");
    CHECK(strcmp(mpx_data_shared_dir(), tmp) == 0, "shared dir %s, want %s", mpx_data_shared_dir(), tmp);
    char want[4200];
    snprintf(want, sizeof want, "%s/data/cache", mpx_source_dir());
    CHECK(strcmp(mpx_data_cache_dir(), want) == 0, "cache dir %s, want %s", mpx_data_cache_dir(), want);
}

/* An atomic file: nothing under its name until committed; abort leaves what was there. */
static void test_atomic(const char *tmp) {
    char path[1100];
    snprintf(path, sizeof path, "%s/atomic.bin", tmp);
    fx_write_file(path, "old", 3);
    mpx_fs_atomic a;
    CHECK_OK(mpx_fs_atomic_open(&a, path));
    fputs("new contents", a.f);
    char *got;
    size_t n;
    CHECK_OK(mpx_fs_read_all(path, &got, &n));
    CHECK(n == 3 && memcmp(got, "old", 3) == 0, "the file changed before the commit");
    free(got);
    mpx_fs_atomic_abort(&a);
    CHECK_OK(mpx_fs_read_all(path, &got, &n));
    CHECK(n == 3 && memcmp(got, "old", 3) == 0, "abort changed the file");
    free(got);
    CHECK(access(a.tmp, F_OK) != 0, "abort left %s", a.tmp);
    CHECK_OK(mpx_fs_atomic_open(&a, path));
    fputs("new contents", a.f);
    CHECK_OK(mpx_fs_atomic_commit(&a));
    CHECK_OK(mpx_fs_read_all(path, &got, &n));
    CHECK(n == 12 && memcmp(got, "new contents", 12) == 0, "commit did not write the file");
    free(got);
}

int main(void) {
    char tmp[1024];
    REQUIRE(mpx_test_tmpdir("data_util", tmp, sizeof tmp)[0], "no temp dir");
    test_data_roots(tmp);
    test_atomic(tmp);
    test_sha256();
    test_tar(tmp);
    test_resample();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return mpx_test_done(__FILE__);
}
