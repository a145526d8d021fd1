/* conv_simd.h - the SIMD half of conv.c, instantiated once per vector ISA.
 *
 * Included by conv.c after it defines Geom and valid_range() and these
 * macros: SFX(name) (the per-ISA name), ATTR (the target attribute), V (the
 * vector type) and VL (its float lanes), MR2/MR1 (the micro-kernel rows for
 * 2 and 1 vectors of columns; MR1 = 2*MR2), and VZERO(), VLD(p), VST(p, v),
 * VBC(p) (broadcast *p), VFMA(a, b, c) (a*b + c, fused), VADD(a, b),
 * VLDM(p, lo, hi) (lanes [lo, hi) of p, zero elsewhere, nothing else read),
 * VSTN(p, v, n) (the first n lanes), VLDB(p, bits) (the lanes whose bit is
 * set, zero elsewhere), VLDBP(p, m) (VLDB with the bits at *m, a uint16_t),
 * VLDS2(p, lo, hi) (lane l = p[2l] for l in [lo, hi), zero elsewhere;
 * nothing outside [2lo, 2hi-1) read) and VTRANSPOSE(r) (transposes the
 * VL x VL matrix held in rows r[0..VL-1]).
 *
 * Layouts (NRP = 2*VL):
 *   panel format  P[j][row][NRP]: column block j of a [rows, cols] matrix,
 *                 row by row, NRP floats each; the im2col matrix is built in
 *                 it, and the GEMMs read their B operand in it (or with NR =
 *                 VL columns per panel);
 *   A-blocked     A[t / NRP][row][NRP]: the same thing seen as the A operand
 *                 of C = A.B, element (row, t) at (t/NRP)*abs + row*NRP +
 *                 t%NRP.  So the micro-kernel broadcasts A at constant
 *                 offsets from one pointer, and the im2col matrix in panel
 *                 format is directly the A operand of the weight gradient.
 * A operands have their rows padded (with zeros) to a multiple of MR1, so
 * the micro-kernel always reads whole row blocks; C is written with masks.
 */

#define NRP (2 * VL)

/* lanes [lo, hi) of a vector, clamped, as bits */
static inline uint32_t SFX(range_bits)(long lo, long hi)
{
    lo = lo < 0 ? 0 : lo > VL ? VL : lo;
    hi = hi < 0 ? 0 : hi > VL ? VL : hi;
    if (hi <= lo)
        return 0;
    return (uint32_t)(((1ull << hi) - 1) & ~((1ull << lo) - 1));
}

/* ---- micro-kernels: C[mr, nr] (+)= A[mr rows, kd] . B[kd, NV*VL] ---------------
 * a: A-blocked (block stride abs), b: rows of NV*VL floats. */
#define RT_KERNEL(NAME, MR, NV)                                                          \
    static ATTR void NAME(int kd, const float *a, size_t abs, const float *b, float *c,   \
                          size_t ldc, int mr, int nr, bool add)                          \
    {                                                                                     \
        V acc[MR][NV];                                                                    \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                            \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[r][v] = VZERO();    \
        for (int t0 = 0; t0 < kd; t0 += NRP, a += abs) {                                  \
            int len = kd - t0 < NRP ? kd - t0 : NRP;                                      \
            for (int t = 0; t < len; t++, b += NV * VL) {                                 \
                V bv[NV];                                                                 \
                _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) bv[v] = VLD(b + v * VL); \
                _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                  \
                    V s = VBC(a + r * NRP + t);                                           \
                    _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++)                  \
                        acc[r][v] = VFMA(s, bv[v], acc[r][v]);                            \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                          \
            if (r >= mr)                                                                  \
                break;                                                                    \
            float *cr = c + (size_t)r * ldc;                                              \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) {                        \
                int n = nr - v * VL;                                                      \
                if (n >= VL) {                                                            \
                    V o = add ? VADD(VLD(cr + v * VL), acc[r][v]) : acc[r][v];            \
                    VST(cr + v * VL, o);                                                  \
                } else if (n > 0) {                                                       \
                    V o = add ? VADD(VLDM(cr + v * VL, 0, n), acc[r][v]) : acc[r][v];     \
                    VSTN(cr + v * VL, o, n);                                              \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }

RT_KERNEL(SFX(kern2), MR2, 2)
RT_KERNEL(SFX(kern1), MR1, 1)

/* The same with nothing packed (the fp32 pointwise forward, which has no
 * workspace): A row r at a + r*lda (rows >= mr not read), B row t at b +
 * t*ldb with nr valid columns. */
static ATTR void SFX(kernu)(int kd, const float *a, size_t lda, const float *b, size_t ldb,
                            float *c, size_t ldc, int mr, int nr, bool add)
{
    V acc[MR2][2];
    const float *ar[MR2];
    _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {
        acc[r][0] = acc[r][1] = VZERO();
        ar[r] = a + (size_t)(r < mr ? r : mr - 1) * lda;
    }
    int n0 = nr < VL ? nr : VL, n1 = nr - VL;
    for (int t = 0; t < kd; t++, b += ldb) {
        V b0, b1;
        if (nr == 2 * VL) {
            b0 = VLD(b);
            b1 = VLD(b + VL);
        } else {
            b0 = VLDM(b, 0, n0);
            b1 = n1 > 0 ? VLDM(b + VL, 0, n1) : VZERO();
        }
        _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {
            V s = VBC(ar[r] + t);
            acc[r][0] = VFMA(s, b0, acc[r][0]);
            acc[r][1] = VFMA(s, b1, acc[r][1]);
        }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {
        if (r >= mr)
            break;
        float *cr = c + (size_t)r * ldc;
        _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++) {
            int n = nr - v * VL;
            if (n >= VL) {
                V o = add ? VADD(VLD(cr + v * VL), acc[r][v]) : acc[r][v];
                VST(cr + v * VL, o);
            } else if (n > 0) {
                V o = add ? VADD(VLDM(cr + v * VL, 0, n), acc[r][v]) : acc[r][v];
                VSTN(cr + v * VL, o, n);
            }
        }
    }
}

static ATTR void SFX(gemmu)(int M, int N, int kd, const float *a, size_t lda, const float *b,
                            size_t ldb, float *c, size_t ldc, bool add)
{
    for (int j = 0; j < N; j += NRP) {
        int nn = N - j < NRP ? N - j : NRP;
        for (int i = 0; i < M; i += MR2) {
            int mm = M - i < MR2 ? M - i : MR2;
            SFX(kernu)(kd, a + (size_t)i * lda, lda, b + j, ldb, c + (size_t)i * ldc + j, ldc,
                       mm, nn, add);
        }
    }
}

/* Implicit GEMM for the geometries im2col_fast handles: B is never built.
 * Step t = (c, k1, k2) of the depth reads the panel's 2*VL columns from the
 * input plane at x + st[t].off (x is the panel's first column), through the
 * lane masks mp[st[t].mi] (low VL bits: first vector, next VL: second),
 * which zero what the im2col matrix would have padded (two masks of VL
 * bits a step: VLDBP). */
static ATTR void SFX(kimp)(int kd, const float *a, size_t abs, const float *x, const ImStep *st,
                           const uint16_t *mp, float *c, size_t ldc, int mr, int nr, bool add)
{
    V acc[MR2][2];
    _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) acc[r][0] = acc[r][1] = VZERO();
    for (int t0 = 0; t0 < kd; t0 += NRP, a += abs) {
        int len = kd - t0 < NRP ? kd - t0 : NRP;
        const ImStep *s = st + t0;
        for (int t = 0; t < len; t++) {
            const uint16_t *m = mp + 2 * s[t].mi;
            const float *b = x + s[t].off;
            V b0 = VLDBP(b, m), b1 = VLDBP(b + VL, m + 1);
            _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {
                V sv = VBC(a + r * NRP + t);
                acc[r][0] = VFMA(sv, b0, acc[r][0]);
                acc[r][1] = VFMA(sv, b1, acc[r][1]);
            }
        }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {
        if (r >= mr)
            break;
        float *cr = c + (size_t)r * ldc;
        _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++) {
            int n = nr - v * VL;
            if (n >= VL) {
                V o = add ? VADD(VLD(cr + v * VL), acc[r][v]) : acc[r][v];
                VST(cr + v * VL, o);
            } else if (n > 0) {
                V o = add ? VADD(VLDM(cr + v * VL, 0, n), acc[r][v]) : acc[r][v];
                VSTN(cr + v * VL, o, n);
            }
        }
    }
}

/* C[M, nn] (+)= W . col(x) for panel j (nn <= NRP columns) by kimp: a is the
 * A-blocked weights, st the call's step table, t the geometry's tables. */
static ATTR void SFX(gemm_imp)(const Im2colTab *t, size_t j, int M, int nn, int kd,
                               const float *a, size_t abs, const float *x, const ImStep *st,
                               float *c, size_t ldc, bool add)
{
    uint16_t mp[2 * RT_FAST_K * RT_FAST_K];
    long col0 = (long)(j * NRP);
    int q0 = (int)((size_t)(col0 / VL) % (size_t)t->period);
    int q1 = q0 + 1 == t->period ? 0 : q0 + 1;
    for (int k1 = 0; k1 < t->k1; k1++) {
        uint32_t r0 = SFX(range_bits)(t->vc0[k1] - col0, t->vc1[k1] - col0);
        uint32_t r1 = SFX(range_bits)(t->vc0[k1] - col0 - VL, t->vc1[k1] - col0 - VL);
        for (int k2 = 0; k2 < t->k2; k2++) {
            mp[2 * (k1 * t->k2 + k2)] = (uint16_t)(t->pm[k2][q0] & r0);
            mp[2 * (k1 * t->k2 + k2) + 1] = (uint16_t)(t->pm[k2][q1] & r1);
        }
    }
    for (int i = 0; i < M; i += MR2) {
        int mm = M - i < MR2 ? M - i : MR2;
        SFX(kimp)(kd, a + (size_t)i * NRP, abs, x + col0, st, mp, c + (size_t)i * ldc, ldc, mm,
                  nn, add);
    }
}

/* The weight gradient without an im2col matrix, for the geometries of
 * im2col_fast: with the sample's planes copied into zero-bordered ones
 * (rows IS1 + 2*P1, row pitch wp = IS2 + 2*P2), row (c, k1, k2) of the
 * im2col matrix at output position (o1, o2) is xpad_c[(o1 + k1*D1)*wp + o2 +
 * k2], always in bounds.  dW^T[rows, NV*VL] (+)= A . Q over output rows
 * [o1a, o1b), each row r of the block read through its own pointer rp[r]
 * (which already includes the (k1, k2) shift). */
#define RT_KPAD(NAME, NV)                                                                  \
    static ATTR void NAME(int o1a, int o1b, int o2n, size_t wp, const float *const *rp,     \
                          const float *b, float *c, size_t ldc, int mr, bool add)           \
    {                                                                                       \
        V acc[MR2][NV];                                                                     \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++)                             \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[r][v] = VZERO();       \
        for (int o1 = o1a; o1 < o1b; o1++) {                                                \
            const float *ar[MR2];                                                           \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) ar[r] =                 \
                rp[r] + (size_t)o1 * wp;                                                    \
            for (int o2 = 0; o2 < o2n; o2++, b += NV * VL) {                                \
                V bv[NV];                                                                   \
                _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) bv[v] = VLD(b + v * VL); \
                _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {                   \
                    V sv = VBC(ar[r] + o2);                                                 \
                    _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++)                    \
                        acc[r][v] = VFMA(sv, bv[v], acc[r][v]);                             \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR2; r++) {                           \
            if (r >= mr)                                                                    \
                break;                                                                      \
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) {                          \
                float *cr = c + (size_t)r * ldc + v * VL;                                   \
                VST(cr, add ? VADD(VLD(cr), acc[r][v]) : acc[r][v]);                        \
            }                                                                               \
        }                                                                                   \
    }
RT_KPAD(SFX(kpad2), 2)
RT_KPAD(SFX(kpad1), 1)
#undef RT_KPAD

/* Copies cg planes of x into zero-bordered planes (see kpad) */
static ATTR void SFX(pad_planes)(const Geom *g, const float *x, float *xp)
{
    const int H = g->IS[1], W = g->IS[2], P1 = g->P[1], P2 = g->P[2];
    const int wp = W + 2 * P2, hp = H + 2 * P1;
    for (int c = 0; c < g->cg; c++) {
        const float *xc = x + (size_t)c * g->in;
        float *d = xp + (size_t)c * (size_t)hp * (size_t)wp;
        for (int r = 0; r < hp; r++, d += wp) {
            int i = r - P1;
            const float *src = xc + (ptrdiff_t)i * W - P2; /* column e reads src[e] */
            for (int e = 0; e < wp; e += VL) {
                int n = wp - e < VL ? wp - e : VL;
                int l0 = P2 - e, l1 = P2 + W - e;
                l0 = l0 < 0 ? 0 : l0;
                l1 = l1 > n ? n : l1;
                V v = i >= 0 && i < H && l1 > l0 ? VLDM(src + e, l0, l1) : VZERO();
                if (n == VL)
                    VST(d + e, v);
                else
                    VSTN(d + e, v, n);
            }
        }
    }
}

/* dW^T[cg*KK, ldw] (+)= col(x) . Q for one sample and group by kpad: xp the
 * padded planes, q the dy^T panels ([nkb][OUT][nrw]); add: onto acc. */
static ATTR void SFX(bww_pad)(const Geom *g, const float *xp, const float *q, int nv,
                              float *acc, size_t ldw, bool add)
{
    const int O1 = g->O[1], O2 = g->O[2], K1 = g->K[1], K2 = g->K[2], nrw = nv * VL;
    const size_t wp = (size_t)g->IS[2] + 2 * (size_t)g->P[2];
    const size_t plane = ((size_t)g->IS[1] + 2 * (size_t)g->P[1]) * wp;
    const int rows = g->cg * K1 * K2, nkb = (g->kg + nrw - 1) / nrw;
    /* output rows a pass: about 8*NRP steps, so a Q chunk stays in L1 */
    int chunk = (8 * NRP + O2 - 1) / O2;
    for (int o1a = 0; o1a < O1; o1a += chunk) {
        int o1b = o1a + chunk < O1 ? o1a + chunk : O1;
        bool ad = add || o1a > 0;
        for (int kb = 0; kb < nkb; kb++) {
            const float *b = q + ((size_t)kb * g->out + (size_t)o1a * O2) * (size_t)nrw;
            for (int i = 0; i < rows; i += MR2) {
                const float *rp[MR2];
                for (int r = 0; r < MR2; r++) {
                    int row = i + r < rows ? i + r : rows - 1;
                    int c = row / (K1 * K2), k1 = row / K2 % K1, k2 = row % K2;
                    rp[r] = xp + (size_t)c * plane + (size_t)k1 * g->D[1] * wp + (size_t)k2;
                }
                float *cc = acc + (size_t)i * ldw + (size_t)kb * nrw;
                int mr = rows - i < MR2 ? rows - i : MR2;
                if (nv == 2)
                    SFX(kpad2)(o1a, o1b, O2, wp, rp, b, cc, ldw, mr, ad);
                else
                    SFX(kpad1)(o1a, o1b, O2, wp, rp, b, cc, ldw, mr, ad);
            }
        }
    }
}

/* C[M, N] (+)= A[M, kd] . B[kd, N]: A A-blocked (rows padded to a multiple of
 * MR1, block stride abs), B in panels of nv*VL columns (panel stride bps),
 * C row-major with leading dimension ldc.  add: C += instead of C =. */
#define RT_KC (8 * NRP) /* depth per pass: a B panel of it stays in L1 */
static ATTR void SFX(gemm)(int nv, int M, int N, int kd, const float *a, size_t abs,
                           const float *b, size_t bps, float *c, size_t ldc, bool add)
{
    int mr = nv == 2 ? MR2 : MR1, nr = nv * VL;
    for (int kc = 0; kc < kd; kc += RT_KC) {
        int kl = kd - kc < RT_KC ? kd - kc : RT_KC;
        const float *ak = a + (size_t)(kc / NRP) * abs;
        bool ad = add || kc > 0;
        for (int j = 0; j < N; j += nr) {
            const float *bj = b + (size_t)(j / nr) * bps + (size_t)kc * nr;
            int nn = N - j < nr ? N - j : nr;
            for (int i = 0; i < M; i += mr) {
                int mm = M - i < mr ? M - i : mr;
                if (nv == 2)
                    SFX(kern2)(kl, ak + (size_t)i * NRP, abs, bj, c + (size_t)i * ldc + j, ldc,
                               mm, nn, ad);
                else
                    SFX(kern1)(kl, ak + (size_t)i * NRP, abs, bj, c + (size_t)i * ldc + j, ldc,
                               mm, nn, ad);
            }
        }
    }
}

/* dy^T of one sample and group, [nkb][OUT][nrw]: q[kb][p][j] = dy[kb*nrw+j][p]
 * (0 beyond kg), by VLxVL register transposes where whole, else lane by lane. */
static ATTR void SFX(pack_dyt)(const float *dy, int kg, size_t out, int nrw, float *q)
{
    size_t nkb = ((size_t)kg + (size_t)nrw - 1) / (size_t)nrw;
    for (size_t kb = 0; kb < nkb; kb++) {
        float *qb = q + kb * out * (size_t)nrw;
        for (int j0 = 0; j0 < nrw; j0 += VL) {
            int k0 = (int)kb * nrw + j0, jn = kg - k0 < VL ? kg - k0 : VL;
            size_t p = 0;
            if (jn == VL)
                for (; p + VL <= out; p += VL) {
                    V r[VL];
                    _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++)
                        r[i] = VLD(dy + (size_t)(k0 + i) * out + p);
                    VTRANSPOSE(r);
                    _Pragma("GCC unroll 16") for (int i = 0; i < VL; i++)
                        VST(qb + (p + (size_t)i) * (size_t)nrw + (size_t)j0, r[i]);
                }
            for (; p < out; p++)
                for (int i = 0; i < VL; i++)
                    qb[p * (size_t)nrw + (size_t)(j0 + i)] =
                        i < jn ? dy[(size_t)(k0 + i) * out + p] : 0.0f;
        }
    }
}

/* Writes columns [qa, qb) of a line of the matrix that starts at column
 * col of row `row` (panel format, panels from j0 at stride ps): value q is
 * src[q*s] when q in [lo, hi), else 0 (src NULL: all zero).  src may point
 * outside the image where lo > 0; only lanes in [lo, hi) are read. */
static ATTR void SFX(put_line)(float *p, size_t ps, size_t j0, size_t row, size_t col, int qa,
                               int qb, const float *src, int s, int lo, int hi)
{
    int q = qa;
    while (q < qb) {
        size_t cc = col + (size_t)q;
        int lane = (int)(cc % NRP);
        int seg = qb - q < NRP - lane ? qb - q : NRP - lane;
        float *d = p + (cc / NRP - j0) * ps + row * NRP + (size_t)lane;
        if (!src || hi <= q || lo >= q + seg) {
            memset(d, 0, (size_t)seg * sizeof *d);
        } else if (s == 1) {
            for (int e = 0; e < seg; e += VL) {
                int n = seg - e < VL ? seg - e : VL;
                int l0 = lo - (q + e), l1 = hi - (q + e);
                l0 = l0 < 0 ? 0 : l0;
                l1 = l1 > n ? n : l1;
                V v = l1 > l0 ? VLDM(src + (ptrdiff_t)(q + e), l0, l1) : VZERO();
                if (n == VL)
                    VST(d + e, v);
                else
                    VSTN(d + e, v, n);
            }
        } else if (s == 2) {
            for (int e = 0; e < seg; e += VL) {
                int n = seg - e < VL ? seg - e : VL;
                int l0 = lo - (q + e), l1 = hi - (q + e);
                l0 = l0 < 0 ? 0 : l0;
                l1 = l1 > n ? n : l1;
                V v = l1 > l0 ? VLDS2(src + 2 * (ptrdiff_t)(q + e), l0, l1) : VZERO();
                if (n == VL)
                    VST(d + e, v);
                else
                    VSTN(d + e, v, n);
            }
        } else {
            for (int e = 0; e < seg; e++) {
                int o = q + e;
                d[e] = o >= lo && o < hi ? src[(ptrdiff_t)o * s] : 0.0f;
            }
        }
        q += seg;
    }
}

/* im2col when each row of the matrix is the channel plane shifted: 1-D or
 * 2-D, stride 1, no dilation along the rows, output rows as wide as the
 * input's (the "same" 3x3 pad 1 convolution, its adjoint, and 1x1 copies).
 * Column col of row (c, k1, k2) is plane[col + shift], valid when its
 * output row is in [lo1, hi1) and its output column in [lo2, hi2); the
 * column condition repeats every lcm(O2, VL) columns, so it is tabled per k2
 * as lane masks, one per vector of a period (Im2colTab, made once a call). */
static ATTR void SFX(im2col_prep)(const Geom *g, Im2colTab *t)
{
    t->fast = false;
    if (g->O[0] != 1 || g->IS[0] != 1 || g->K[0] != 1 || g->S[1] != 1 || g->S[2] != 1 ||
        g->D[2] != 1 || g->O[2] != g->IS[2] || g->K[1] > RT_FAST_K || g->K[2] > RT_FAST_K)
        return;
    const int O2 = g->O[2];
    int gcd = O2, b = VL;
    while (b) {
        int r = gcd % b;
        gcd = b;
        b = r;
    }
    if (O2 / gcd > RT_FAST_PERIOD) /* lcm(O2, VL) / VL vectors */
        return;
    t->fast = true;
    t->period = O2 / gcd;
    t->k1 = g->K[1];
    t->k2 = g->K[2];
    for (int k2 = 0; k2 < g->K[2]; k2++) {
        int lo, hi;
        valid_range(g, 2, k2, &lo, &hi);
        for (int q = 0; q < t->period; q++) {
            uint32_t bits = 0;
            for (int l = 0; l < VL; l++) {
                int o2 = (q * VL + l) % O2;
                bits |= (uint32_t)(o2 >= lo && o2 < hi) << l;
            }
            t->pm[k2][q] = bits;
        }
    }
    for (int k1 = 0; k1 < g->K[1]; k1++) {
        int lo, hi;
        valid_range(g, 1, k1, &lo, &hi);
        t->vc0[k1] = (long)lo * O2;
        t->vc1[k1] = (long)hi * O2;
        t->sh[k1] = ((long)k1 * g->D[1] - g->P[1]) * g->IS[2] - g->P[2];
    }
}


static ATTR void SFX(im2col_fast)(const Geom *g, const Im2colTab *t, const float *x, float *p,
                                  size_t rows_p, size_t j0, size_t j1)
{
    const int K1 = g->K[1], K2 = g->K[2], period = t->period;
    size_t rows = (size_t)g->cg * (size_t)K1 * (size_t)K2;
    for (size_t j = j0; j < j1; j++) {
        float *d = p + (j - j0) * rows_p * NRP;
        long col0 = (long)(j * NRP);
        int q0 = (int)((size_t)(col0 / VL) % (size_t)period), q1 = q0 + 1 == period ? 0 : q0 + 1;
        uint32_t r0[RT_FAST_K], r1[RT_FAST_K];
        for (int k1 = 0; k1 < K1; k1++) {
            r0[k1] = SFX(range_bits)(t->vc0[k1] - col0, t->vc1[k1] - col0);
            r1[k1] = SFX(range_bits)(t->vc0[k1] - col0 - VL, t->vc1[k1] - col0 - VL);
        }
        for (int c = 0; c < g->cg; c++) {
            const float *xc = x + (size_t)c * g->in + col0;
            for (int k1 = 0; k1 < K1; k1++) {
                const float *src = xc + t->sh[k1];
                for (int k2 = 0; k2 < K2; k2++, d += NRP) {
                    uint32_t b0 = t->pm[k2][q0] & r0[k1], b1 = t->pm[k2][q1] & r1[k1];
                    VST(d, b0 ? VLDB(src + k2, b0) : VZERO());
                    VST(d + VL, b1 ? VLDB(src + k2 + VL, b1) : VZERO());
                }
            }
        }
        for (size_t r = rows; r < rows_p; r++, d += NRP)
            memset(d, 0, NRP * sizeof(float));
    }
}

/* im2col for any other 1-D or 2-D geometry: per panel, the pieces of output
 * rows (o1, columns [qa, qb)) that fall into it are listed once, then every
 * row (c, k1, k2) of the matrix copies them from input row o1*S1 - P1 + k1*D1
 * (vector loads for column strides 1 and 2). */
static ATTR void SFX(im2col_2d)(const Geom *g, const float *x, float *p, size_t rows_p,
                                size_t j0, size_t j1)
{
    const int O1 = g->O[1], O2 = g->O[2], S2 = g->S[2];
    size_t rows = (size_t)g->cg * g->kk;
    struct {
        int o1, qa, qb, lane;
    } seg[NRP];
    int lo2[RT_FAST_K], hi2[RT_FAST_K];
    for (int k2 = 0; k2 < g->K[2]; k2++)
        valid_range(g, 2, k2, &lo2[k2], &hi2[k2]);
    for (size_t j = j0; j < j1; j++) {
        float *d = p + (j - j0) * rows_p * NRP;
        size_t c0 = j * NRP, c1 = c0 + NRP < g->out ? c0 + NRP : g->out;
        int ns = 0;
        for (size_t cc = c0; cc < c1;) {
            int o1 = (int)(cc / (size_t)O2), qa = (int)(cc % (size_t)O2);
            int qb = (size_t)(O2 - qa) < c1 - cc ? O2 : qa + (int)(c1 - cc);
            seg[ns].o1 = o1;
            seg[ns].qa = qa;
            seg[ns].qb = qb;
            seg[ns].lane = (int)(cc - c0);
            ns++;
            cc += (size_t)(qb - qa);
        }
        int tail = (int)(c1 - c0); /* lanes [tail, NRP) are beyond OUT */
        for (int c = 0; c < g->cg; c++) {
            const float *xc = x + (size_t)c * g->in;
            for (int k1 = 0; k1 < g->K[1]; k1++)
                for (int k2 = 0; k2 < g->K[2]; k2++, d += NRP) {
                    int lo = lo2[k2], hi = hi2[k2];
                    long i2 = (long)k2 * g->D[2] - g->P[2];
                    for (int e = 0; e < ns; e++) {
                        float *dd = d + seg[e].lane;
                        int qa = seg[e].qa, n = seg[e].qb - qa;
                        long i1 = (long)seg[e].o1 * g->S[1] - g->P[1] + (long)k1 * g->D[1];
                        const float *src = i1 >= 0 && i1 < g->IS[1] && lo < hi
                                               ? xc + (size_t)i1 * g->IS[2] + i2
                                               : NULL;
                        for (int f = 0; f < n; f += VL) {
                            int m = n - f < VL ? n - f : VL, q = qa + f;
                            int l0 = lo - q, l1 = hi - q;
                            l0 = l0 < 0 ? 0 : l0;
                            l1 = l1 > m ? m : l1;
                            V v = VZERO();
                            if (src && l1 > l0) {
                                if (S2 == 1)
                                    v = VLDM(src + q, l0, l1);
                                else if (S2 == 2)
                                    v = VLDS2(src + 2 * (ptrdiff_t)q, l0, l1);
                                else {
                                    float tmp[VL] = {0};
                                    for (int l = l0; l < l1; l++)
                                        tmp[l] = src[(ptrdiff_t)(q + l) * S2];
                                    v = VLD(tmp);
                                }
                            }
                            if (m == VL)
                                VST(dd + f, v);
                            else
                                VSTN(dd + f, v, m);
                        }
                    }
                    if (tail < NRP)
                        memset(d + tail, 0, (size_t)(NRP - tail) * sizeof(float));
                }
        }
        for (size_t r = rows; r < rows_p; r++, d += NRP)
            memset(d, 0, NRP * sizeof(float));
    }
    (void)O1;
}

/* Panels [j0, j1) of the im2col matrix [cg*KK, OUT] of the fp32 planes x
 * (cg channels of the group) in panel format (panel j at p + (j-j0)*rows_p*
 * NRP), rows padded with zeros to rows_p and columns beyond OUT zero. */
static ATTR void SFX(im2col_p)(const Geom *g, const Im2colTab *t, const float *x, float *p,
                               size_t rows_p, size_t j0, size_t j1)
{
    if (t->fast) {
        SFX(im2col_fast)(g, t, x, p, rows_p, j0, j1);
        return;
    }
    if (g->O[0] == 1 && g->IS[0] == 1 && g->K[0] == 1 && g->K[2] <= RT_FAST_K) {
        SFX(im2col_2d)(g, x, p, rows_p, j0, j1);
        return;
    }
    const int O1 = g->O[1], O2 = g->O[2];
    size_t ps = rows_p * NRP, row = 0, c0 = j0 * NRP, c1 = j1 * NRP;
    for (int c = 0; c < g->cg; c++)
        for (int k0 = 0; k0 < g->K[0]; k0++)
            for (int k1 = 0; k1 < g->K[1]; k1++)
                for (int k2 = 0; k2 < g->K[2]; k2++, row++) {
                    int lo, hi;
                    valid_range(g, 2, k2, &lo, &hi);
                    long i2 = -(long)g->P[2] + (long)k2 * g->D[2]; /* input of o2 = 0 */
                    /* the lines (o0, o1) that meet columns [c0, c1) */
                    size_t l0 = c0 / (size_t)O2, l1 = (c1 + (size_t)O2 - 1) / (size_t)O2;
                    size_t nl = (size_t)g->O[0] * (size_t)O1;
                    l1 = l1 < nl ? l1 : nl;
                    for (size_t l = l0; l < l1; l++) {
                        int o0 = (int)(l / (size_t)O1), o1 = (int)(l % (size_t)O1);
                        size_t col = l * (size_t)O2;
                        int qa = col < c0 ? (int)(c0 - col) : 0;
                        int qb = col + (size_t)O2 > c1 ? (int)(c1 - col) : O2;
                        long i0 = (long)o0 * g->S[0] - g->P[0] + (long)k0 * g->D[0];
                        long i1 = (long)o1 * g->S[1] - g->P[1] + (long)k1 * g->D[1];
                        const float *src = NULL;
                        if (i0 >= 0 && i0 < g->IS[0] && i1 >= 0 && i1 < g->IS[1] && lo < hi)
                            src = x + (((size_t)c * g->IS[0] + (size_t)i0) * g->IS[1] +
                                       (size_t)i1) * g->IS[2] + i2;
                        SFX(put_line)(p, ps, j0, row, col, qa, qb, src, g->S[2], lo, hi);
                    }
                    if (g->out < c1) {
                        size_t from = g->out > c0 ? g->out : c0;
                        SFX(put_line)(p, ps, j0, row, from, 0, (int)(c1 - from), NULL, 1, 0, 0);
                    }
                }
    for (; row < rows_p; row++)
        for (size_t j = j0; j < j1; j++)
            memset(p + (j - j0) * ps + row * NRP, 0, NRP * sizeof(float));
}

#undef RT_KERNEL
#undef RT_KC

#undef NRP
