/* image.c - JPEG/PNG decoding and the augmentation of ImageRecordIter
 * (image.h; docs/training.md, RecordIO).
 *
 * Decoding: TurboJPEG (libjpeg-turbo; accurate integer DCT, as libjpeg's
 * default that OpenCV uses) and libpng's simplified API, both loaded with
 * dlopen once (a program that never reads an image needs neither).  A grey
 * model gets the libraries' own colour-to-grey conversion.  With resize=,
 * a JPEG is decoded with TurboJPEG's DCT scaling (1/2, 1/4, 1/8) to the
 * smallest size whose shorter side is not below resize, then resized to
 * the size MXNet computes from the file's size: a 24 MP photograph for a
 * 256-pixel side costs 0.4 MP of memory, not 24 (rt_img_plan says what a
 * decode costs before it runs, for the decoding budget of prefetch.c).
 *
 * Augmentation, in ImageRecordIter's order (MXNet src/io/image_aug_default.cc):
 * resize the shorter side; then a crop of the output size, random
 * (rand_crop) or centred, or a random resized crop (area fraction and
 * aspect ratio drawn, the region resized to the output); a mirror; then
 * (x - mean[c]) / std[c] * scale.  Resizing is bilinear with OpenCV's
 * pixel-centre convention (src = (dst + 0.5) * in/out - 0.5, clamped), in
 * floating point (OpenCV rounds in fixed point: values may differ by 1).
 * Every draw is rt_rand_uniform(seed, stream(epoch), key * 64 + k): the same
 * image gets the same crop whatever thread decodes it.
 */
#include <dlfcn.h>
#include <math.h>
#include <png.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "image.h"
#include "rand.h"

/* ---- the libraries --------------------------------------------------------- */

static struct {
    bool ok;
    char err[256];
    __typeof__(tjInitDecompress) *tj_init;
    __typeof__(tjDecompressHeader3) *tj_header;
    __typeof__(tjDecompress2) *tj_decompress;
    __typeof__(tjDestroy) *tj_destroy;
    __typeof__(tjGetErrorStr2) *tj_errstr;
    __typeof__(png_image_begin_read_from_memory) *png_begin;
    __typeof__(png_image_finish_read) *png_finish;
    __typeof__(png_image_free) *png_free;
} L;
static pthread_once_t libs_once = PTHREAD_ONCE_INIT;

static void *sym(void *lib, const char *name, const char *libname)
{
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p && !L.err[0])
        snprintf(L.err, sizeof L.err, "%s has no %s", libname, name);
    return p;
}

static void libs_load(void)
{
    static const char tjname[] = "libturbojpeg.so.0", pngname[] = "libpng16.so.16";
    void *tj = dlopen(tjname, RTLD_NOW | RTLD_LOCAL);
    void *png = dlopen(pngname, RTLD_NOW | RTLD_LOCAL);
    if (!tj || !png) {
        snprintf(L.err, sizeof L.err, "cannot load %s (%s): apt-get install %s",
                 tj ? pngname : tjname, dlerror(), tj ? "libpng16-16" : "libturbojpeg0");
        return;
    }
    /* POSIX: a function pointer from dlsym's void * (through memcpy, as ISO C asks) */
    void *p;
#define LOAD(field, lib, name, libname)                                                            \
    p = sym(lib, name, libname);                                                                   \
    memcpy(&L.field, &p, sizeof p)
    LOAD(tj_init, tj, "tjInitDecompress", tjname);
    LOAD(tj_header, tj, "tjDecompressHeader3", tjname);
    LOAD(tj_decompress, tj, "tjDecompress2", tjname);
    LOAD(tj_destroy, tj, "tjDestroy", tjname);
    LOAD(tj_errstr, tj, "tjGetErrorStr2", tjname);
    LOAD(png_begin, png, "png_image_begin_read_from_memory", pngname);
    LOAD(png_finish, png, "png_image_finish_read", pngname);
    LOAD(png_free, png, "png_image_free", pngname);
#undef LOAD
    L.ok = !L.err[0];
}

bool rt_img_libs(char *err, size_t errlen)
{
    pthread_once(&libs_once, libs_load);
    if (!L.ok)
        snprintf(err, errlen, "%s", L.err);
    return L.ok;
}

void rt_img_worker_shrink(RtImgWorker *wk)
{
    free(wk->px);
    free(wk->tmp);
    wk->px = wk->tmp = NULL;
    wk->px_cap = wk->tmp_cap = 0;
}

void rt_img_worker_free(RtImgWorker *wk)
{
    if (wk->tj)
        L.tj_destroy(wk->tj);
    free(wk->px);
    free(wk->tmp);
    free(wk->taps);
    memset(wk, 0, sizeof *wk);
}

static bool grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    uint8_t *nb = realloc(*buf, need);
    if (!nb)
        return false;
    *buf = nb;
    *cap = need;
    return true;
}

/* Images above 2^28 pixels are refused (a corrupt header, or no photo). */
#define MAX_PIXELS ((size_t)1 << 28)

static bool size_ok(int w, int h, char *err, size_t errlen)
{
    if (w <= 0 || h <= 0 || (size_t)w * (size_t)h > MAX_PIXELS) {
        snprintf(err, errlen, "image size %dx%d is out of range (1 to 2^28 pixels)", w, h);
        return false;
    }
    return true;
}

static bool tj_handle(RtImgWorker *wk, char *err, size_t errlen)
{
    if (!wk->tj && !(wk->tj = L.tj_init())) {
        snprintf(err, errlen, "TurboJPEG: cannot make a decompressor");
        return false;
    }
    return true;
}

/* TJSCALED: a side scaled by num/den, rounded up, as TurboJPEG scales */
static int scaled(int side, int num, int den)
{
    return (int)(((int64_t)side * num + den - 1) / den);
}

/* libpng's simplified reader started on data (its header read); false with
 * its message (im freed). */
static bool png_header(png_image *im, const uint8_t *data, size_t n, char *err, size_t errlen)
{
    memset(im, 0, sizeof *im);
    im->version = PNG_IMAGE_VERSION;
    if (L.png_begin(im, data, n))
        return true;
    snprintf(err, errlen, "PNG: %s", im->message);
    L.png_free(im);
    return false;
}

/* The smallest of 1/8, 1/4, 1/2 (else 1) whose shorter side stays >= side. */
static void jpeg_scale(int w, int h, int side, int *dw, int *dh)
{
    *dw = w, *dh = h;
    if (side <= 0)
        return;
    for (int den = 8; den >= 2; den /= 2)
        if (scaled(w < h ? w : h, 1, den) >= side) {
            *dw = scaled(w, 1, den), *dh = scaled(h, 1, den);
            return;
        }
}

/* The shorter side to `side`, as MXNet computes the other (integer
 * arithmetic: longer * side / shorter). */
static void shorter_to(int w, int h, int side, int *nw, int *nh)
{
    if (w <= h) {
        *nw = side;
        *nh = (int)((int64_t)h * side / w);
    } else {
        *nh = side;
        *nw = (int)((int64_t)w * side / h);
    }
}

bool rt_img_plan(RtImgWorker *wk, const uint8_t *data, size_t n, int format, int c,
                 const RtRecOptions *o, RtImgPlan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (!rt_img_libs(err, errlen))
        return false;
    if (format == RT_IMG_JPEG) {
        int sub, space;
        if (!tj_handle(wk, err, errlen))
            return false;
        if (L.tj_header(wk->tj, data, (unsigned long)n, &p->w, &p->h, &sub, &space) != 0) {
            snprintf(err, errlen, "JPEG: %s", L.tj_errstr(wk->tj));
            return false;
        }
    } else if (format == RT_IMG_PNG) {
        png_image im;
        if (!png_header(&im, data, n, err, errlen))
            return false;
        L.png_free(&im);
        if (im.width > 1u << 30 || im.height > 1u << 30) {
            snprintf(err, errlen, "PNG: image size %ux%u is out of range", im.width, im.height);
            return false;
        }
        p->w = (int)im.width;
        p->h = (int)im.height;
    } else {
        snprintf(err, errlen, "the image is neither a JPEG nor a PNG file");
        return false;
    }
    if (!size_ok(p->w, p->h, err, errlen))
        return false;
    p->dw = p->w, p->dh = p->h;
    if (format == RT_IMG_JPEG)
        jpeg_scale(p->w, p->h, o->resize, &p->dw, &p->dh);
    p->px_bytes = (size_t)p->dw * (size_t)p->dh * (size_t)c;
    if (o->resize > 0) {
        int nw, nh;
        shorter_to(p->w, p->h, o->resize, &nw, &nh);
        if (!size_ok(nw, nh, err, errlen))
            return false;
        p->tmp_bytes = (size_t)nw * (size_t)nh * (size_t)c;
    }
    return true;
}

static bool decode_jpeg(RtImgWorker *wk, const uint8_t *data, size_t n, int c, const RtImgPlan *p,
                        char *err, size_t errlen)
{
    if (!tj_handle(wk, err, errlen))
        return false;
    if (!grow(&wk->px, &wk->px_cap, p->px_bytes)) {
        snprintf(err, errlen, "out of memory for a %dx%d image", p->dw, p->dh);
        return false;
    }
    /* a width and height below the file's: TurboJPEG's DCT scaling */
    if (L.tj_decompress(wk->tj, data, (unsigned long)n, wk->px, p->dw, 0, p->dh,
                        c == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
        snprintf(err, errlen, "JPEG: %s", L.tj_errstr(wk->tj));
        return false;
    }
    return true;
}

static bool decode_png(RtImgWorker *wk, const uint8_t *data, size_t n, int c, const RtImgPlan *p,
                       char *err, size_t errlen)
{
    png_image im;
    if (!png_header(&im, data, n, err, errlen))
        return false;
    if ((int)im.width != p->dw || (int)im.height != p->dh) { /* not the planned image */
        snprintf(err, errlen, "PNG: its header changed between two reads");
        L.png_free(&im);
        return false;
    }
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    if (!grow(&wk->px, &wk->px_cap, p->px_bytes)) {
        snprintf(err, errlen, "out of memory for a %dx%d image", p->dw, p->dh);
        L.png_free(&im);
        return false;
    }
    if (!L.png_finish(&im, NULL, wk->px, 0, NULL)) {
        snprintf(err, errlen, "PNG: %s", im.message);
        L.png_free(&im);
        return false;
    }
    L.png_free(&im);
    return true;
}

bool rt_img_decode(RtImgWorker *wk, const uint8_t *data, size_t n, int format, int c,
                   const RtImgPlan *p, char *err, size_t errlen)
{
    if (!rt_img_libs(err, errlen))
        return false;
    if (format == RT_IMG_JPEG)
        return decode_jpeg(wk, data, n, c, p, err, errlen);
    if (format == RT_IMG_PNG)
        return decode_png(wk, data, n, c, p, err, errlen);
    snprintf(err, errlen, "the image is neither a JPEG nor a PNG file");
    return false;
}

/* ---- resampling ------------------------------------------------------------- */

/* One output coordinate's bilinear taps: the two source indices and the
 * weight of the second (OpenCV's pixel centres: src = o + (d + 0.5) * f - 0.5,
 * clamped to the image). */
typedef struct {
    int i0, i1;
    float t;
} Tap;

static void make_taps(Tap *tp, int n, double origin, double f, int size)
{
    for (int d = 0; d < n; d++) {
        double pos = origin + (d + 0.5) * f - 0.5;
        if (pos < origin)
            pos = origin; /* the region's edge, not its neighbour's pixels */
        if (pos > size - 1)
            pos = size - 1;
        tp[d].i0 = (int)pos;
        tp[d].i1 = tp[d].i0 + 1 < size ? tp[d].i0 + 1 : tp[d].i0;
        tp[d].t = (float)(pos - tp[d].i0);
    }
}

/* The taps of both axes in wk's scratch: tx[ow], ty[oh]. */
static bool taps(RtImgWorker *wk, int ow, int oh, Tap **tx, Tap **ty)
{
    size_t need = ((size_t)ow + (size_t)oh) * sizeof(Tap);
    if (need > wk->taps_cap) {
        void *p = realloc(wk->taps, need);
        if (!p)
            return false;
        wk->taps = p;
        wk->taps_cap = need;
    }
    *tx = wk->taps;
    *ty = *tx + ow;
    return true;
}

static inline float lerp2(const uint8_t *r0, const uint8_t *r1, const Tap *x, const Tap *y, int c,
                          int ch)
{
    float a = r0[x->i0 * c + ch] + x->t * (r0[x->i1 * c + ch] - r0[x->i0 * c + ch]);
    float b = r1[x->i0 * c + ch] + x->t * (r1[x->i1 * c + ch] - r1[x->i0 * c + ch]);
    return a + y->t * (b - a);
}

/* The shorter side to `side`, the other as MXNet computes it from the
 * file's size (p->w x p->h: the decoded image may be scaled down already),
 * into wk->tmp; *sw, *sh (the decoded size) updated. */
static bool resize_shorter(RtImgWorker *wk, const RtImgPlan *p, int *sw, int *sh, int c, int side,
                           char *err, size_t errlen)
{
    int nw, nh;
    shorter_to(p->w, p->h, side, &nw, &nh);
    if (!size_ok(nw, nh, err, errlen))
        return false;
    if (!grow(&wk->tmp, &wk->tmp_cap, (size_t)nw * nh * c)) {
        snprintf(err, errlen, "out of memory resizing to %dx%d", nw, nh);
        return false;
    }
    Tap *tx, *ty;
    if (!taps(wk, nw, nh, &tx, &ty)) {
        snprintf(err, errlen, "out of memory resizing to %dx%d", nw, nh);
        return false;
    }
    make_taps(tx, nw, 0, (double)*sw / nw, *sw);
    make_taps(ty, nh, 0, (double)*sh / nh, *sh);
    size_t stride = (size_t)*sw * c;
    for (int y = 0; y < nh; y++) {
        const uint8_t *r0 = wk->px + ty[y].i0 * stride, *r1 = wk->px + ty[y].i1 * stride;
        uint8_t *o = wk->tmp + (size_t)y * nw * c;
        for (int x = 0; x < nw; x++)
            for (int ch = 0; ch < c; ch++)
                o[x * c + ch] = (uint8_t)(lerp2(r0, r1, &tx[x], &ty[y], c, ch) + 0.5f);
    }
    uint8_t *t = wk->px;
    size_t tc = wk->px_cap;
    wk->px = wk->tmp;
    wk->px_cap = wk->tmp_cap;
    wk->tmp = t;
    wk->tmp_cap = tc;
    *sw = nw;
    *sh = nh;
    return true;
}

/* ---- the augmentation --------------------------------------------------------- */

typedef struct {
    int x0, y0, cw, ch; /* the region of the source */
    bool flip;
} Crop;

static double draw(uint64_t seed, uint64_t stream, uint64_t key, int k)
{
    return rt_rand_uniform(seed, stream, key * 64 + (uint64_t)k);
}

/* Inception-style: up to 10 tries of an area fraction and a log-uniform
 * aspect ratio; else the centred crop of the output's aspect ratio. */
static Crop resized_crop(int sw, int sh, const RtRecOptions *o, int h, int w, uint64_t seed,
                         uint64_t stream, uint64_t key)
{
    double area = (double)sw * sh;
    for (int t = 0; t < 10; t++) {
        double lr0 = log(o->min_aspect_ratio), lr1 = log(o->max_aspect_ratio);
        double ratio = exp(lr0 + (lr1 - lr0) * draw(seed, stream, key, 8 + t));
        double a = o->min_random_area + (o->max_random_area - o->min_random_area) *
                                     draw(seed, stream, key, 24 + t);
        int cw = (int)lround(sqrt(a * area * ratio)), ch = (int)lround(sqrt(a * area / ratio));
        if (cw >= 1 && ch >= 1 && cw <= sw && ch <= sh) {
            int x0 = (int)((sw - cw + 1) * draw(seed, stream, key, 40 + t));
            int y0 = (int)((sh - ch + 1) * draw(seed, stream, key, 56 + t));
            return (Crop){x0, y0, cw, ch, false};
        }
    }
    double want = (double)w / h;
    int cw = sw, ch = sh;
    if ((double)sw / sh > want)
        cw = (int)lround(sh * want);
    else
        ch = (int)lround(sw / want);
    cw = cw < 1 ? 1 : cw;
    ch = ch < 1 ? 1 : ch;
    return (Crop){(sw - cw) / 2, (sh - ch) / 2, cw, ch, false};
}

bool rt_img_augment(RtImgWorker *wk, const RtImgPlan *p, const RtRecOptions *o, bool train,
                    int c, int h, int w, uint64_t seed, uint64_t epoch, uint64_t key, float *dst,
                    char *err, size_t errlen)
{
    int sw = p->dw, sh = p->dh;
    if (o->resize > 0 && !resize_shorter(wk, p, &sw, &sh, c, o->resize, err, errlen))
        return false;
    uint64_t stream = rt_mix64(rt_hash_name("recordio") + epoch);
    Crop cr;
    if (train && o->random_resized_crop)
        cr = resized_crop(sw, sh, o, h, w, seed, stream, key);
    else {
        if (sw < w || sh < h) {
            snprintf(err, errlen, "the image is %dx%d (after resize=%d), smaller than the "
                     "model's %dx%d input: set resize= or random_resized_crop=1", sw, sh,
                     o->resize, w, h);
            return false;
        }
        cr = (Crop){(sw - w) / 2, (sh - h) / 2, w, h, false};
        if (train && o->rand_crop) {
            cr.x0 = (int)((sw - w + 1) * draw(seed, stream, key, 1));
            cr.y0 = (int)((sh - h + 1) * draw(seed, stream, key, 2));
        }
    }
    cr.flip = train && o->rand_mirror && draw(seed, stream, key, 3) < 0.5;
    size_t plane = (size_t)h * w, stride = (size_t)sw * c;
    Tap *tx, *ty;
    if (!taps(wk, w, h, &tx, &ty)) {
        snprintf(err, errlen, "out of memory for a %dx%d crop", w, h);
        return false;
    }
    /* a crop of the output's size samples whole pixels: t = 0, exact */
    make_taps(tx, w, cr.x0, (double)cr.cw / w, cr.x0 + cr.cw);
    make_taps(ty, h, cr.y0, (double)cr.ch / h, cr.y0 + cr.ch);
    float mul[3], mean[3];
    for (int ch = 0; ch < c; ch++) {
        mul[ch] = o->scale / o->std[ch];
        mean[ch] = o->mean[ch];
    }
    for (int y = 0; y < h; y++) {
        const uint8_t *r0 = wk->px + ty[y].i0 * stride, *r1 = wk->px + ty[y].i1 * stride;
        float *out = dst + (size_t)y * w;
        for (int x = 0; x < w; x++) {
            const Tap *t = &tx[cr.flip ? w - 1 - x : x];
            for (int ch = 0; ch < c; ch++)
                out[ch * plane + x] = (lerp2(r0, r1, t, &ty[y], c, ch) - mean[ch]) * mul[ch];
        }
    }
    return true;
}
