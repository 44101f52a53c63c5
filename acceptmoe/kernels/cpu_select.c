/* The verifier's selection on a CPU, compiled once (`cpu_verifier.py` builds and loads it with ctypes).

   Two entry points, plain C over contiguous arrays, no allocation beyond the stack:
   - topk_rows: per row, the ids of the k largest values, best first, ties to the lower index (the project's
     one ranking rule, `acceptmoe.methods.topk`), optionally among the experts a mask allows;
   - select_blocks: one MoE layer's eligible sets for B blocks from per-token terms: truncated block scores,
     the root anchor, the fixed or self-sized set (effective rank in fixed point), residency pruning
     (docs/method.md; `acceptmoe.methods.fixed` states the integer rules).

   Float work stays with the caller (the router's softmax and gather in torch, `Router.weights`), so the
   inputs here are the model's exact fp32 values; everything below is an fp32 product per term, truncation
   to integers, integer sums and comparisons, so every set equals the torch backend's bit for bit.
   Built with -ffp-contract=off: a product is rounded once, as torch rounds it. */
#include <math.h>
#include <stdint.h>

enum { SIZING_ALL = 0, SIZING_FIXED = 1, SIZING_SELF = 2 };
enum { MAX_K = 256 };

/* params[] of select_blocks (the plan's constants), in this order */
enum { P_ANCHOR, P_SIZING, P_BUDGET, P_GUARD, P_RHO_Q, P_MIN_SET, P_BITS, P_COUNT };

int64_t params_count(void) { return P_COUNT; }

/* the insertion step of a top-k scan: v at index e enters the best-first list best/ids of n <= k entries when
   the list is short or v beats its last (a tie keeps the lower index already held: indices arrive ascending) */
static inline void offer(float v, int64_t e, int64_t k, float *best, int64_t *ids, int64_t *n) {
    if (*n == k && !(v > best[k - 1])) return;
    int64_t i = *n < k ? (*n)++ : k - 1;
    while (i > 0 && v > best[i - 1]) { best[i] = best[i - 1]; ids[i] = ids[i - 1]; i--; }
    best[i] = v;
    ids[i] = e;
}

/* the largest of z[lo..hi), hi > lo, in four independent running maxima (no serial dependency per value) */
static inline float chunk_max(const float *z, int64_t lo, int64_t hi) {
    float m0 = z[lo], m1 = m0, m2 = m0, m3 = m0;
    int64_t e = lo + 1;
    for (; e + 4 <= hi; e += 4) {
        m0 = z[e] > m0 ? z[e] : m0;
        m1 = z[e + 1] > m1 ? z[e + 1] : m1;
        m2 = z[e + 2] > m2 ? z[e + 2] : m2;
        m3 = z[e + 3] > m3 ? z[e + 3] : m3;
    }
    for (; e < hi; e++) m0 = z[e] > m0 ? z[e] : m0;
    m0 = m1 > m0 ? m1 : m0;
    m2 = m3 > m2 ? m3 : m2;
    return m2 > m0 ? m2 : m0;
}

/* ids[0..k) of the k largest z[e] over all e < E, best first, ties to the lower index. */
static void topk_row(const float *z, int64_t E, int64_t k, int64_t *ids) {
    float best[MAX_K], floor = -INFINITY;
    int64_t n = 0;
    if (k > 1 && E >= 4 * k) {
        /* the k chunk maxima are k distinct values, so their minimum is at most the k-th largest: only
           values >= it can enter (a single compare per value, then a short insertion) */
        const int64_t width = E / k;
        floor = INFINITY;
        for (int64_t c = 0; c < k; c++) {
            const float m = chunk_max(z, c * width, c == k - 1 ? E : (c + 1) * width);
            floor = m < floor ? m : floor;
        }
    }
    for (int64_t e = 0; e < E; e++)
        if (!(z[e] < floor)) offer(z[e], e, k, best, ids, &n);
}

/* ids[0..k) of the k largest z[e] among the experts among[0..count) (ascending), best first, ties to the
   lower index; returns how many were found (< k only when count < k). */
static int64_t topk_among(const float *z, const int64_t *among, int64_t count, int64_t k, int64_t *ids) {
    float best[MAX_K];
    int64_t n = 0;
    for (int64_t i = 0; i < count; i++) offer(z[among[i]], among[i], k, best, ids, &n);
    return n;
}

/* the allowed experts of a mask row, ascending, into among; returns their count */
static int64_t members(const uint8_t *allowed, int64_t E, int64_t *among) {
    int64_t m = 0;
    for (int64_t e = 0; e < E; e++) among[m] = e, m += allowed[e] != 0;
    return m;
}

/* z [rows, E] -> ids [rows, k]; allowed NULL or [rows / per_mask, E] (row r reads mask r / per_mask).
   Returns the first row with fewer than k allowed experts, or -1. */
int64_t topk_rows(const float *z, int64_t rows, int64_t E, int64_t k, const uint8_t *allowed, int64_t per_mask,
                  int64_t *ids) {
    if (k > MAX_K || k > E) return 0;
    int64_t among[E], count = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (!allowed) {
            topk_row(z + r * E, E, k, ids + r * k);
            continue;
        }
        if (r % per_mask == 0) count = members(allowed + (r / per_mask) * E, E, among);
        if (topk_among(z + r * E, among, count, k, ids + r * k) < k) return r;
    }
    return -1;
}

/* log2(x) * 2^16 for 1 <= x < 2^31 (`fixed.log2_fixed`): the top bit, then 16 squarings of Q1.30. */
static int64_t log2_fixed(int64_t x) {
    const int64_t e = 63 - __builtin_clzll((unsigned long long)x);   /* floor(log2 x) */
    int64_t m = x << (30 - e), out = e << 16;
    for (int i = 0; i < 16; i++) {
        int64_t square = m * m, top = square >> 61;
        m = square >> (30 + top);
        out |= top << (15 - i);
    }
    return out;
}

/* `fixed`'s effective rank of the candidates' demand d[0..E) (candidates: d > 0). log2_fixed(n) rises with
   n (consecutive integers up to E differ in log2 by far more than its 2^-16 error), so the sizes n with
   S (log2 n + guard) < S H2 are 1..m and the count stops at the first that is not. */
static int64_t effective_rank(const int64_t *d, int64_t E, int64_t guard) {
    int64_t S = 0, candidates = 0, weighted = 0;
    for (int64_t e = 0; e < E; e++) {
        S += d[e];
        candidates += d[e] > 0;
        if (d[e] > 1) weighted += d[e] * log2_fixed(d[e]);
    }
    const int64_t entropy = S * log2_fixed(S > 1 ? S : 1) - weighted;
    int64_t shorter = 0;
    while (shorter < E && S * (log2_fixed(shorter + 1) + guard) < entropy) shorter++;
    return shorter + 1 < candidates ? shorter + 1 : candidates;
}

/* the ranking: primary descending, then secondary descending, then lower index (a total order) */
static inline int better(int64_t a, int64_t b, const float *p, const float *s) {
    return p[a] > p[b] || (p[a] == p[b] && s[a] > s[b]);      /* equal scores: the earlier (lower) id wins */
}

/* ids[0..count) (ascending) -> ids[0..min(n, count)) their best n in ranking order: an insertion into the
   kept prefix, which only the values that beat its last entry enter */
static void rank(int64_t *ids, int64_t count, int64_t n, const float *p, const float *s) {
    int64_t kept = 0;
    for (int64_t i = 0; i < count && n > 0; i++) {
        const int64_t e = ids[i];
        if (kept == n && !better(e, ids[n - 1], p, s)) continue;
        int64_t j = kept < n ? kept++ : n - 1;
        while (j > 0 && better(e, ids[j - 1], p, s)) { ids[j] = ids[j - 1]; j--; }
        ids[j] = e;
    }
}

/* Residency pruning of one block's S in place: the longest prefix of S \ H \ A in ascending utility (ties:
   the higher index first, the ranking read from its end) whose integer scores fit the rho budget and that
   leaves at least min_set experts. */
static void prune(uint8_t *S, const uint8_t *A, const uint8_t *H, const float *fp, const float *zeros,
                  int64_t *order, int64_t E, int64_t rho_q, int64_t min_set) {
    int64_t total = 0, size = 0, walk = 0, mass = 0;
    for (int64_t e = 0; e < E; e++) {
        if (!S[e]) continue;
        total += (int64_t)fp[e], size++;
        if (!H[e] && !A[e]) order[walk++] = e;
    }
    rank(order, walk, walk, fp, zeros);
    for (int64_t i = walk - 1; i >= 0; i--) {
        const int64_t e = order[i];
        mass += (int64_t)fp[e];
        if ((mass << 16) > rho_q * total || size - 1 < min_set) break;
        S[e] = 0, size--;
    }
}

/* adds sign times one token's truncated terms (row `row` of term, weighted by weight[row]) to the integer
   scores p: dense [E] terms, or [k] terms on the token's natural ids (NULL: 1.0 per member) */
static void add_row(int64_t *p, int64_t row, int64_t sign, int64_t E, int64_t k, const int64_t *natural,
                    const float *term, const float *weight, int64_t dense, float scale) {
    const int64_t *ids = natural + row * k;
    const float w = weight[row];
    if (dense) {
        for (int64_t e = 0; e < E; e++) p[e] += sign * (int32_t)(term[row * E + e] * w * scale);
    } else {
        for (int64_t j = 0; j < k; j++) p[ids[j]] += sign * (int32_t)((term ? term[row * k + j] : 1.0f) * w * scale);
    }
}

/* One layer's sets for B blocks of T tokens over E experts, and the routing inside them. z [B, T, E] fp32 values
   whose order is the router's (the logits, or minus the rank: `cpu_verifier.CHOICE`); natural [B, T, k] each
   token's natural top-k (topk_rows); term: [B, T, k] on those ids, [B, T, E] (dense != 0), or NULL (1.0 per member:
   votes); tie: [B, T, k] the secondary score's terms or NULL; weight [B, T] each token's factor (1.0 / 0.0 valid,
   or alpha); resident NULL or [resident_rows, E] (1 row: shared by the blocks). Outputs eligible [B, E], utility
   [B, E] (the score as fp32, in units of 1), anchor [B, E], and routed [B, T, k] (NULL: not routed), the top-k
   inside S: a token's natural top-k when all of it is in S (the same ids), else a scan; with it masked [B, T, E],
   the values with -inf outside S (for a router that ranks its logits: the masked logits its weights are computed
   from). batch_roots != 0: each block's score also sums the other blocks' root terms (row 0 of each block; a
   padding row weighs 0).
   Returns the first block whose S holds fewer than k experts (left unrouted), or -1. */
int64_t select_blocks(int64_t B, int64_t T, int64_t E, int64_t k, const float *z, const int64_t *natural,
                      const float *term, const float *tie, const float *weight, int64_t dense, int64_t batch_roots,
                      const uint8_t *resident, int64_t resident_rows, const int64_t *params, uint8_t *eligible,
                      float *utility, uint8_t *anchor, int64_t *routed, float *masked) {
    const float scale = (float)((int64_t)1 << params[P_BITS]), unscale = 1.0f / scale;
    int64_t primary[E], secondary[E], order[E], demand[E], roots[E];
    float fp[E], fs[E], zeros[E];
    int64_t short_block = -1;
    for (int64_t e = 0; e < E; e++) roots[e] = 0;
    if (batch_roots)                                      /* every root's terms, summed once for the pass */
        for (int64_t b = 0; b < B; b++) add_row(roots, b * T, 1, E, k, natural, term, weight, dense, scale);
    for (int64_t b = 0; b < B; b++) {
        uint8_t *S = eligible + b * E, *A = anchor + b * E;
        for (int64_t e = 0; e < E; e++) primary[e] = roots[e], secondary[e] = 0, A[e] = 0, zeros[e] = 0.0f;
        if (batch_roots) add_row(primary, b * T, -1, E, k, natural, term, weight, dense, scale);   /* the others' */
        for (int64_t t = 0; t < T; t++) {                 /* per-token terms, truncated, summed as integers */
            const int64_t row = b * T + t, *ids = natural + row * k;
            const float w = weight[row];
            add_row(primary, row, 1, E, k, natural, term, weight, dense, scale);
            if (tie)
                for (int64_t j = 0; j < k; j++) secondary[ids[j]] += (int32_t)(tie[row * k + j] * w * scale);
        }
        int64_t n_anchor = 0;
        if (params[P_ANCHOR])                             /* the root's natural top-k */
            for (int64_t j = 0; j < k; j++) A[natural[b * T * k + j]] = 1, n_anchor++;
        int64_t rest = 0;
        for (int64_t e = 0; e < E; e++) {
            fp[e] = (float)primary[e];                    /* a block score is held as fp32, then ranked */
            fs[e] = (float)secondary[e];
            utility[b * E + e] = fp[e] * unscale;
            demand[e] = A[e] ? 0 : (int64_t)fp[e];
            S[e] = A[e];
            if (!A[e]) order[rest++] = e;
        }
        int64_t n = rest;                                 /* SIZING_ALL: every expert */
        if (params[P_SIZING] == SIZING_FIXED) n = params[P_BUDGET] - n_anchor;
        if (params[P_SIZING] == SIZING_SELF) n = effective_rank(demand, E, params[P_GUARD]);
        if (n > 0 && n < rest) rank(order, rest, n, fp, fs);
        for (int64_t i = 0; i < n && i < rest; i++) S[order[i]] = 1;
        if (resident)
            prune(S, A, resident + (resident_rows > 1 ? b * E : 0), fp, zeros, order, E, params[P_RHO_Q],
                  params[P_MIN_SET]);
        if (!routed) continue;
        const int64_t size = members(S, E, order);      /* S's experts, ascending (order is free now) */
        if (size < k) {
            if (short_block < 0) short_block = b;
            continue;
        }
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = b * T + t, *ids = natural + row * k;
            const float *zr = z + row * E;
            float *mr = masked + row * E;
            int64_t *out = routed + row * k, all_in = 1;
            for (int64_t j = 0; j < k; j++) all_in &= S[ids[j]], out[j] = ids[j];
            if (!all_in) topk_among(zr, order, size, k, out);
            for (int64_t e = 0; e < E; e++) mr[e] = -INFINITY;
            for (int64_t i = 0; i < size; i++) mr[order[i]] = zr[order[i]];
        }
    }
    return short_block;
}
