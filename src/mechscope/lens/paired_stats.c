/* NLL, JS and both KLs from paired logits: the native kernel of mechscope.lens.divergence.
 *
 * The formula is the module docstring's of divergence.py, for one row (a continuation
 * token) with conditions A and B:
 *
 *     e_c = exp(z_c - max z_c)   s_c = sum e_c   p_c = e_c / s_c
 *     log p_c = (z_c - max z_c) - log s_c
 *     log m = log(p_A + p_B) - ln 2
 *     JS = 1/2 sum_c sum p_c (log p_c - log m)   KL(c||c') = sum p_c (log p_c - log p_c')
 *
 * Why C: the work is three transcendental functions per vocabulary pair over
 * layers x tokens x vocabulary pairs (3 G pairs for a 2,048-token continuation on a
 * 49,152-word vocabulary), and it must stay small beside the unembedding that produced
 * the logits. Plain loops with inline exp/log polynomials (Cephes' expf and logf, about
 * 1 ulp) let the compiler vectorise every pass; each row is read three times (max,
 * exp-sum, divergences) while it and its exponentials stay in the core's cache. (Taking
 * the max and the exponentials in one read, against a running max, measured slower.)
 *
 * Sums: fp32 within blocks of BLOCK elements (vectorised), fp64 across blocks, so the
 * rounding of a 49,152-term sum stays near that of a 1,024-term one.
 *
 * Symmetry: both conditions go through the same operations (A and B swap roles, nothing
 * else does), and JS adds the two halves with a commutative +, so swapping the conditions
 * gives bit-identical JS and exactly swapped KLs and NLLs.
 *
 * One thread per call: the caller runs independent chunks on its own workers.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 1024

static const float LN2F = 0.693147180559945309f;
static const float TINYF = 1.17549435e-38f; /* smallest normal float */
static const float JS_MAXF = 0.693147123f;  /* largest float not above ln 2 */
/* exp(x) for x below this is under the smallest normal float: taken as 0. */
static const float EXP_MIN = -87.0f;

/* exp(x) for x <= 0 (Cephes expf): x = n ln2 + r, |r| <= ln2 / 2, degree-6 polynomial. */
static inline float exp_nonpos(float x) {
    float xc = x < EXP_MIN ? EXP_MIN : x;
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f; /* ln 2 in two parts */
    float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < EXP_MIN ? 0.0f : p * scale;
}

/* log(x) for normal finite x > 0 (Cephes logf): x = 2^e m, m in [sqrt(1/2), sqrt(2)). */
static inline float log_normal(float x) {
    int32_t bits;
    memcpy(&bits, &x, sizeof bits);
    float e = (float)((bits >> 23) - 126);
    int32_t mbits = (bits & 0x007fffff) | 0x3f000000; /* mantissa in [0.5, 1) */
    float m;
    memcpy(&m, &mbits, sizeof m);
    int below = m < 0.707106781186547524f;
    e = below ? e - 1.0f : e;
    m = below ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float y = ((((((((7.0376836292e-2f * m - 1.1514610310e-1f) * m + 1.1676998740e-1f) * m
                    - 1.2420140846e-1f) * m + 1.4249322787e-1f) * m - 1.6668057665e-1f) * m
                  + 2.0000714765e-1f) * m - 2.4999993993e-1f) * m + 3.3333331174e-1f)
              * m * z;
    y += e * -2.12194440e-4f;
    y += -0.5f * z;
    return m + y + e * 0.693359375f;
}

static inline float clampf(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

/* z: [rows, 2, vocab] fp32, contiguous; targets: [rows], each in [0, vocab);
 * out: [5, rows] fp32 (NLL_A, NLL_B, JS, KL(A||B), KL(B||A)).
 * Returns 0, or -1 if the scratch buffer could not be allocated. */
int mechscope_paired_stats(const float *z, const int64_t *targets, int64_t rows,
                           int64_t vocab, float *out) {
    float *ea = malloc(2 * (size_t)vocab * sizeof(float)); /* e_A, then e_B */
    if (!ea) return -1;
    float *eb = ea + vocab;
    for (int64_t r = 0; r < rows; r++) {
        const float *za = z + 2 * r * vocab;
        const float *zb = za + vocab;
        float ma = -INFINITY, mb = -INFINITY;
#pragma omp simd reduction(max : ma, mb)
        for (int64_t i = 0; i < vocab; i++) {
            ma = za[i] > ma ? za[i] : ma;
            mb = zb[i] > mb ? zb[i] : mb;
        }
        double sa = 0.0, sb = 0.0;
        for (int64_t s = 0; s < vocab; s += BLOCK) {
            int64_t end = s + BLOCK < vocab ? s + BLOCK : vocab;
            float ba = 0.0f, bb = 0.0f;
#pragma omp simd reduction(+ : ba, bb)
            for (int64_t i = s; i < end; i++) {
                float ya = exp_nonpos(za[i] - ma), yb = exp_nonpos(zb[i] - mb);
                ea[i] = ya;
                eb[i] = yb;
                ba += ya;
                bb += yb;
            }
            sa += ba;
            sb += bb;
        }
        /* log p = (z - max) - log s: z - max first, so a large max costs no precision. */
        float ls_a = (float)log(sa), ls_b = (float)log(sb);
        float ra = (float)(1.0 / sa), rb = (float)(1.0 / sb);
        double ja = 0.0, jb = 0.0, ka = 0.0, kb = 0.0;
        for (int64_t s = 0; s < vocab; s += BLOCK) {
            int64_t end = s + BLOCK < vocab ? s + BLOCK : vocab;
            float fja = 0.0f, fjb = 0.0f, fka = 0.0f, fkb = 0.0f;
#pragma omp simd reduction(+ : fja, fjb, fka, fkb)
            for (int64_t i = s; i < end; i++) {
                float pa = ea[i] * ra, pb = eb[i] * rb;
                float la = (za[i] - ma) - ls_a, lb = (zb[i] - mb) - ls_b;
                float mix = pa + pb;
                float lm = log_normal(mix < TINYF ? TINYF : mix) - LN2F;
                float d = la - lb; /* and -d for B: negation is exact, so A, B swap exactly */
                fja += pa * (la - lm);
                fjb += pb * (lb - lm);
                fka += pa * d;
                fkb += pb * -d;
            }
            ja += fja;
            jb += fjb;
            ka += fka;
            kb += fkb;
        }
        int64_t t = targets[r];
        out[r] = -((za[t] - ma) - ls_a);
        out[rows + r] = -((zb[t] - mb) - ls_b);
        out[2 * rows + r] = clampf((float)(0.5 * (ja + jb)), 0.0f, JS_MAXF);
        /* rounding can dip below 0; NaN (non-finite logits) stays NaN, never 0 */
        out[3 * rows + r] = ka < 0.0 ? 0.0f : (float)ka;
        out[4 * rows + r] = kb < 0.0 ? 0.0f : (float)kb;
    }
    free(ea);
    return 0;
}
