# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The arithmetic of every rank-based metric, one user at a time, in the order that defines it.

For each valid user: the test entries sorted by rank; running sums over them in rank order
(hits, the AP terms j / rank, the DCG terms g / scale / discount[rank] and g / discount[rank],
the RBP terms persistence**(rank - 1), the ideal DCG terms over the positive gains in
descending order, and the integer count of (non-relevant, relevant) pairs in the wrong order
inside the list); the value at a cut-off K is read off when the
running sums have taken every entry of rank <= K. So a metric at K depends on K alone, not
on the other cut-offs asked for, and on no batch, device, thread or user order. Every float
operation is one IEEE-754 +, -, *, / in this order; log2 comes from the caller's table of
correctly rounded values (the discount table). _metrics.metrics_from_ranks prepares the inputs and documents the
NaN rules applied here (6 and 7; rules 1-5 arrive as `valid`, rule 8 is NDCG's own).
"""
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport qsort, malloc, free
from libc.math cimport NAN

cdef struct Entry:
    int64_t rank
    double gain


cdef int by_rank(const void* x, const void* y) noexcept nogil:
    cdef int64_t a = (<const Entry*>x).rank, b = (<const Entry*>y).rank
    return (a > b) - (a < b)


cdef int descending(const void* x, const void* y) noexcept nogil:
    cdef double a = (<const double*>x)[0], b = (<const double*>y)[0]
    return (a < b) - (a > b)


cdef inline void sort_by_rank(Entry* entry, int64_t m) noexcept nogil:
    """Insertion sort for the usual few test items, qsort beyond."""
    cdef int64_t i, j
    cdef Entry x
    if m > 24:
        qsort(entry, m, sizeof(Entry), by_rank)
        return
    for i in range(1, m):
        x = entry[i]
        j = i - 1
        while j >= 0 and entry[j].rank > x.rank:
            entry[j + 1] = entry[j]
            j -= 1
        entry[j + 1] = x


cdef inline void sort_descending(double* values, int64_t m) noexcept nogil:
    cdef int64_t i, j
    cdef double x
    if m > 24:
        qsort(values, m, sizeof(double), descending)
        return
    for i in range(1, m):
        x = values[i]
        j = i - 1
        while j >= 0 and values[j] < x:
            values[j + 1] = values[j]
            j -= 1
        values[j + 1] = x


cdef inline double fmin_int(int64_t a, int64_t b) noexcept nogil:
    return <double>(a if a < b else b)


def rank_metrics(const int64_t[::1] ranks, const double[::1] gains, const int64_t[::1] n_test,
                 const int64_t[::1] n_pool, const int64_t[::1] length, const int64_t[::1] cutoffs,
                 const double[::1] discount, const double[::1] powers, double persistence,
                 const uint8_t[::1] valid, double[:, ::1] p, double[:, ::1] tp, double[:, ::1] r,
                 double[:, ::1] ap, double[:, ::1] tap, double[:, ::1] ndcg, double[:, ::1] hit,
                 double[:, ::1] rr, double[::1] roc_auc, double[::1] pr_auc, double[:, ::1] dcg_out,
                 double[:, ::1] f1, double[:, ::1] rbp, double[::1] rprec, double[::1] bpref,
                 double[:, ::1] list_auc, const uint8_t[::1] wanted, const uint8_t[::1] modes):
    """Fill the wanted outputs (pre-set to NaN by the caller) of every valid user.

    Entries are grouped by user (n_test[u] each, in any order within a user); wanted holds
    flags for P, TP, R, AP, TAP, NDCG, Hit, RR, ROC_AUC, PR_AUC, DCG, F1, RBP, RPrec, bpref,
    ListAUC;
    cutoffs increase. discount[i]: the DCG divisor at rank i (log2(i + 1) by default);
    powers[i] = persistence**(i - 1), made by repeated multiplication; length[u]: the
    length of the user's list (the pool for whole-pool rankings). modes (the conventions):
    modes[0] 1: P divides by min(K, length) instead of K; modes[1]: R divides by 0: |T|,
    1: min(|T|, K, length), 2: min(|T|, K); modes[2]: AP divides by 0: |T|, 1: min(|T|, K,
    length), 2: the hits in the top K (0 when there is none), 3: min(|T|, K); modes[3] 1:
    RBP weights each hit by its gain (ranx). ListAUC at K, inside the list cut at K
    (L = min(K, length) items, h of them hits, `misordered` = the sum over the hits of the
    non-hits listed above them): 0 when h = 0, 1 when misordered = 0, else
    1 - misordered / (h (L - h)), RePlay's RocAuc."""
    cdef int64_t n_users = n_test.shape[0], n_cut = cutoffs.shape[0]
    cdef int64_t most = 0, u
    for u in range(n_users):
        most = n_test[u] if n_test[u] > most else most
    cdef Entry* entry = <Entry*>malloc(max(1, most) * sizeof(Entry))
    cdef double* ideal = <double*>malloc(max(1, most) * sizeof(double))
    if entry == NULL or ideal == NULL:
        free(entry)
        free(ideal)
        raise MemoryError()
    cdef int64_t start = 0, m, i, c, k, hits, n_neg, sum_rank, next_entry, next_ideal, shown, r_hits, judged
    cdef int64_t misordered
    cdef double scale, running_ap, dcg, idcg, first_rr, j, rank, pr_sum, m_d, k_d, raw_dcg, rbp_sum, bp_sum
    cdef bint sorted_already, has_positive, k_bound
    try:
        with nogil:
            for u in range(n_users):
                m = n_test[u]
                if not valid[u] or m == 0:
                    start += m
                    continue
                sorted_already = True
                has_positive = False
                for i in range(m):
                    entry[i].rank = ranks[start + i]
                    entry[i].gain = gains[start + i]
                    ideal[i] = gains[start + i] if gains[start + i] > 0.0 else 0.0
                    has_positive = has_positive or gains[start + i] > 0.0
                    if i > 0 and entry[i].rank < entry[i - 1].rank:
                        sorted_already = False
                start += m
                if not sorted_already:
                    sort_by_rank(entry, m)
                m_d = <double>m
                n_neg = n_pool[u] - m
                if wanted[8] and n_neg > 0:  # ROC_AUC: the rank sum is exact as an integer
                    sum_rank = 0
                    for i in range(m):
                        sum_rank += entry[i].rank
                    roc_auc[u] = 1.0 - (<double>sum_rank - m_d * (m_d + 1.0) / 2.0) / (m_d * <double>n_neg)
                if wanted[9] and n_neg > 0:  # PR_AUC: precision at each test item's rank
                    pr_sum = 0.0
                    for i in range(m):
                        pr_sum = pr_sum + <double>(i + 1) / <double>entry[i].rank
                    pr_auc[u] = pr_sum / m_d
                if wanted[13] and n_neg > 0:  # RPrec: hits in the top |T|
                    r_hits = 0
                    while r_hits < m and entry[r_hits].rank <= m:
                        r_hits += 1
                    rprec[u] = <double>r_hits / m_d
                if wanted[14] and n_neg > 0:  # bpref: the i-th test item has rank_i - i negatives above it
                    judged = m if m < n_neg else n_neg
                    bp_sum = 0.0
                    for i in range(m):
                        shown = entry[i].rank - (i + 1)
                        bp_sum = bp_sum + (1.0 - <double>(shown if shown < m else m) / <double>judged)
                    bpref[u] = bp_sum / m_d
                if wanted[5]:
                    sort_descending(ideal, m)
                # NDCG is scale-free: divide by the user's largest gain so no sum overflows
                scale = ideal[0] if ideal[0] > 0.0 else 1.0
                hits = 0
                running_ap = 0.0
                dcg = 0.0
                idcg = 0.0
                first_rr = 0.0
                raw_dcg = 0.0
                rbp_sum = 0.0
                misordered = 0
                next_entry = 0
                next_ideal = 0
                for c in range(n_cut):
                    k = cutoffs[c]
                    while next_entry < m and entry[next_entry].rank <= k:
                        rank = <double>entry[next_entry].rank
                        j = <double>(next_entry + 1)
                        hits += 1
                        # the non-relevant items listed above this one: rank - (its place among the hits)
                        misordered += entry[next_entry].rank - (next_entry + 1)
                        running_ap = running_ap + j / rank
                        dcg = dcg + entry[next_entry].gain / scale / discount[entry[next_entry].rank]
                        raw_dcg = raw_dcg + entry[next_entry].gain / discount[entry[next_entry].rank]
                        if modes[3]:  # ranx: weighted by the gain
                            rbp_sum = rbp_sum + entry[next_entry].gain * powers[entry[next_entry].rank]
                        else:
                            rbp_sum = rbp_sum + powers[entry[next_entry].rank]
                        if next_entry == 0:
                            first_rr = 1.0 / rank
                        next_entry += 1
                    while next_ideal < m and next_ideal < k:  # ideal item j sits at rank j
                        idcg = idcg + ideal[next_ideal] / scale / discount[next_ideal + 1]
                        next_ideal += 1
                    if wanted[5]:
                        ndcg[u, c] = dcg / idcg if has_positive else NAN  # rule 8
                    if wanted[10]:
                        dcg_out[u, c] = raw_dcg
                    if n_neg == 0:  # rule 6: every metric but NDCG
                        continue
                    k_d = <double>k
                    k_bound = n_pool[u] <= k  # rule 7: P, TP, R, Hit
                    shown = k if k < length[u] else length[u]  # the length of the list cut at K
                    if wanted[0] and not k_bound:
                        p[u, c] = <double>hits / (<double>shown if modes[0] else k_d)
                    if wanted[1] and not k_bound:
                        tp[u, c] = <double>hits / fmin_int(k, m)
                    if wanted[2] and not k_bound:
                        r[u, c] = <double>hits / (fmin_int(shown, m) if modes[1] == 1 else
                                                  fmin_int(k, m) if modes[1] == 2 else m_d)
                    if wanted[3]:
                        if modes[2] == 2:
                            ap[u, c] = running_ap / <double>hits if hits > 0 else 0.0
                        else:
                            ap[u, c] = running_ap / (fmin_int(shown, m) if modes[2] == 1 else
                                                     fmin_int(k, m) if modes[2] == 3 else m_d)
                    if wanted[4]:
                        tap[u, c] = running_ap / fmin_int(k, m)
                    if wanted[6] and not k_bound:
                        hit[u, c] = 1.0 if hits > 0 else 0.0
                    if wanted[7]:
                        rr[u, c] = first_rr
                    if wanted[11] and not k_bound:
                        f1[u, c] = 2.0 * <double>hits / (k_d + m_d)
                    if wanted[12]:
                        rbp[u, c] = (1.0 - persistence) * rbp_sum
                    if wanted[15]:  # ListAUC (RePlay's RocAuc): 0 without a hit, 1 without a misordered pair
                        if hits == 0:
                            list_auc[u, c] = 0.0
                        elif misordered == 0:
                            list_auc[u, c] = 1.0
                        else:
                            list_auc[u, c] = 1.0 - <double>misordered / <double>(hits * (shown - hits))
    finally:
        free(entry)
        free(ideal)
