// The body of fused_rank.cu's kernels, included there once for each: the kernel GR_FUSED_KERNEL
// whose tile is scored as GR_FUSED_TILE says (FmaTile, TensorTile). A kernel, not a function the
// kernels call: inlined into them, the body spilled registers that as a kernel it does not.
extern "C" __global__ void __launch_bounds__(FUSED_THREADS, 2) GR_FUSED_KERNEL(
    const float* __restrict__ U, const float* __restrict__ B, int64_t n_factors, const double* __restrict__ bias,
    int64_t n_items, int64_t span, int64_t nb, const int64_t* __restrict__ users,
    const int64_t* __restrict__ train_indptr, const int32_t* __restrict__ train_indices,
    const int64_t* __restrict__ tests_begin, const double* __restrict__ test_scores,
    const uint64_t* __restrict__ test_keys, int32_t* __restrict__ cnt, uint64_t* __restrict__ pool_min,
    uint64_t* __restrict__ pool_max, int32_t* __restrict__ nonfinite, const double* __restrict__ tol,
    const double* __restrict__ item_norm, const double* __restrict__ item_terms, uint64_t seed, int noise) {
    using Tile = GR_FUSED_TILE;
    // the tile's factors while it is scored, then its scores (FUSED_STAGE_BYTES, dynamic: _gpu.py)
    GR_DYNAMIC_SHARED(GrWords16, sh_stage, FUSED_STAGE_BYTES);
    typename Tile::Factors& tile_factors = *reinterpret_cast<typename Tile::Factors*>(sh_stage);
    float* const stage = reinterpret_cast<float*>(sh_stage);  // item c of row r at r * FUSED_PITCH + c
    __shared__ uint32_t train_bits[FUSED_USERS][FUSED_ITEMS / 32];  // gr_round_bit's layout: a lane's 4 bits a nibble
    __shared__ int32_t sh_cnt[FUSED_WORDS];  // row r's counts from sh_cnt + sh_first[r], where the block's fit
    __shared__ uint8_t sh_cells[FUSED_USERS][GR_CELLS];  // row r's cells (bands.cuh)
    __shared__ float sh_scale[FUSED_USERS];  // their scale (gr_cells_scale)
    __shared__ float sh_worst[FUSED_USERS];
    __shared__ int64_t sh_first[FUSED_USERS + 1];  // row r's test entries: tb0 + sh_first[r] .. tb0 + sh_first[r + 1]
    __shared__ float sh_bias[FUSED_ITEMS];
    __shared__ uint32_t sh_min[FUSED_USERS], sh_max[FUSED_USERS];  // row r's pool extremes so far (gr_float_key)
    __shared__ int32_t sh_bad[FUSED_USERS];  // row r: a pool score not finite
    __shared__ int32_t sh_nowhere;  // the count of the items placed nowhere (never read)
    __shared__ int32_t warp_queue[FUSED_THREADS / 32][GR_QUEUE];  // items waiting for their defined score
    __shared__ int32_t warp_search_queue[FUSED_THREADS / 32][GR_QUEUE];  // items waiting for the search

    // U: the batch's factors, row b for batch row b (user users[b]); block rows b0 .. b0 + n_rows - 1
    const int64_t b0 = (int64_t)blockIdx.x * FUSED_USERS;
    const int64_t span_begin = (int64_t)blockIdx.y * span;
    if (b0 >= nb || span_begin >= n_items) return;
    const int64_t span_end = min(n_items, span_begin + span);
    const int n_rows = (int)min((int64_t)FUSED_USERS, nb - b0);
    const int64_t tb0 = tests_begin[b0], n_tests = tests_begin[b0 + n_rows] - tb0;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const Tile tile(t);  // this thread's scores of a tile: rounds rho < ROUNDS, row tile.row(rho), items tile.col(rho, j < ITEMS)

    // row r's bands, from its test items' defined scores (the search reads them where a cell does not answer)
    const auto bands_of = [&](int r, int64_t first, int m) {
        return GlobalBands<float>{test_scores + tb0 + first, m == 0 ? 0.0 : tol[b0 + r]};
    };
    // thread r < FUSED_USERS: row r's worst band and cells' scale, and its training items from the span on
    RowTraining training;
    if (t < FUSED_USERS) {
        float worst = (float)GR_INF, scale = 0.0f;  // below worst an item outranks no test item (also: none)
        sh_first[t] = t < n_rows ? tests_begin[b0 + t] - tb0 : n_tests;
        if (t == 0) sh_first[FUSED_USERS] = n_tests;
        if (t < n_rows) {
            const int64_t u = users[b0 + t], t0 = tests_begin[b0 + t], m = tests_begin[b0 + t + 1] - t0;
            const GlobalBands<float> bands = bands_of(t, t0 - tb0, (int)m);
            if (m > 0) worst = bands.low((int)m - 1);
            scale = gr_cells_scale<float>(bands, (int)m, GR_CELLS);
            training = gr_row_training(train_indptr, train_indices, u, span_begin);
        }
        sh_worst[t] = worst;
        sh_scale[t] = scale;
        sh_min[t] = gr_float_key((float)GR_INF);
        sh_max[t] = gr_float_key(-(float)GR_INF);
        sh_bad[t] = 0;
    }
    __syncthreads();
    {  // row t >> 1's cells, half of them each
        const int r = t >> 1;
        const int64_t first = sh_first[r];
        const int m = (int)(sh_first[r + 1] - first);
        const GlobalBands<float> bands = bands_of(r, first, m);
        for (int k = (t & 1) * (GR_CELLS / 2); k < (t & 1 ? GR_CELLS : GR_CELLS / 2); ++k)
            sh_cells[r][k] = gr_cell_entry(bands, m, sh_worst[r], sh_scale[r], (float)(GR_CELLS - 1), k);
    }
    __syncthreads();
    const bool in_shared = n_tests <= FUSED_WORDS;  // the block's counts in shared memory, else in cnt
    if (in_shared)
        for (int i = t; i < (int)n_tests; i += FUSED_THREADS) sh_cnt[i] = 0;  // (gr_score_tile's barriers publish)

    const auto settle_entry = [&](int32_t entry) {
        settle(entry, b0, span_begin, U, B, n_factors, bias, users, tests_begin, test_scores, test_keys, seed, noise,
               in_shared ? sh_cnt : nullptr, cnt);
    };
    int32_t* queue = warp_queue[warp];
    int queued = 0;  // the same in every lane of the warp
    int32_t* search_queue = warp_search_queue[warp];
    int searched = 0;  // (its length, as queued)

    // thread t loads the factors of row t >> 1 (both tiles' loaders; which items it loads is the tile's)
    const int lr = t >> 1;
    const float* a_row = lr < n_rows ? U + (b0 + lr) * n_factors : nullptr;
    for (int64_t j0 = span_begin; j0 < span_end; j0 += FUSED_ITEMS) {
        if (t < FUSED_USERS) gr_tile_prepare<RoundBits>(training, j0, span_end, bias, train_bits[t], sh_bias);
        {  // the tile's scores, biases added (in float, as rank_tile does), staged in shared memory over its factors
            float scores[Tile::ROUNDS][Tile::ITEMS];
            tile.score(tile_factors, a_row, B, j0, span_end, n_factors, bias ? sh_bias : nullptr, scores);
#pragma unroll
            for (int i = 0; i < Tile::ROUNDS; ++i)
#pragma unroll
                for (int j = 0; j < Tile::ITEMS; ++j) stage[tile.row(i) * FUSED_PITCH + tile.col(i, j)] = scores[i][j];
        }
        __syncthreads();
        // Counted as rank_tile counts: warp w takes rows w, w + 8, .., each in one round of its 128 items, a lane
        // items lane + 32 q (q < 4), placed by the row's cells (gr_cell_round). The items to search wait in the
        // warp's queue (search_entry), which is emptied before the stage is overwritten.
        const int tail = (int)min((int64_t)FUSED_ITEMS, span_end - j0);  // the tile's items in the span
        // A queued item (row << 8 | its item of the tile; -1: none, in a lane of a flush) placed by the search:
        // every lane of the warp calls it. Its score is not finite (flagged), or inside a band (deferred: first
        // against its own bound, p n_j + q from score_tolerance's item terms, n_j its norm, where that is below the
        // row's; what that places, it counts as the defined score would, as it lies strictly between the same test
        // items; the rest join the warp's queue for their defined score), or its cell holds a band's edge.
        const auto search_entry = [&](int32_t entry) {
            const bool real = entry >= 0;
            const int r = real ? entry >> 8 : 0, j = entry & 255;
            const int64_t first = sh_first[r];
            const int m = (int)(sh_first[r + 1] - first), top = gr_search_top(m);
            int c = GR_NOWHERE;
            if (real) {
                const float v = stage[r * FUSED_PITCH + j];
                if (!isfinite(v)) atomicOr(&sh_bad[r], 1);
                c = gr_place(bands_of(r, first, m), m, top, sh_worst[r], v);
                if (c == GR_DEFER && isfinite(v)) {
                    const double own = fma(item_terms[b0 + r], item_norm[j0 + j], item_terms[nb + b0 + r]);
                    if (own < tol[b0 + r]) {  // (NaN or inf terms: not a bound to use)
                        const GlobalBands<float> mine{test_scores + tb0 + first, own};
                        c = gr_place(mine, m, top, mine.low(m - 1), v);
                    }
                }
                if (c >= 0 && in_shared) atomicAdd(&sh_cnt[first + c], 1);
                else if (c >= 0) atomicAdd(&cnt[tb0 + first + c], 1);
            }
            gr_defer(queue, queued, c == GR_DEFER, (r << FUSED_ITEM_BITS) | (int32_t)(j0 + j - span_begin),
                     settle_entry);
        };
#pragma unroll 1
        for (int r = warp; r < n_rows; r += FUSED_THREADS / 32) {  // the same in the whole warp
            const int64_t first = sh_first[r];
            const float worst = sh_worst[r];
            const Cells<float> cells = gr_cells<float>(sh_cells[r], sh_scale[r], GR_CELLS);
            // bit q: item lane + 32 q is a pool item: not a training item (gr_round_bit), and in the span
            uint32_t pool = ~(train_bits[r][lane >> 3] >> (4 * (lane & 7))) & 0xFu;
            if (tail < FUSED_ITEMS)
#pragma unroll
                for (int q = 0; q < 4; ++q) pool &= ~((uint32_t)(lane + 32 * q >= tail) << q);
            const float* row = stage + r * FUSED_PITCH + lane;
            float v[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) v[q] = row[32 * q];
            float mn = (float)GR_INF, mx = -(float)GR_INF;
            // bit q: item lane + 32 q's cell does not place it (a place counted in shared memory with no branch: an
            // item placed nowhere counts in sh_nowhere)
            const uint32_t search = gr_cell_round(v, pool, cells, worst, mn, mx, [&](int e) {
                if (in_shared)  // (the same in the whole block)
                    atomicAdd(e < GR_CELL_NOWHERE ? &sh_cnt[first + e] : &sh_nowhere, 1);
                else if (e < GR_CELL_NOWHERE)
                    atomicAdd(&cnt[tb0 + first + e], 1);
            });
            // the items their cells do not place join the warp's search queue, searched 32 at a time: a warp runs the
            // search once for 32 of them, where a lane's own searches ran it as often as the busiest lane had items
            if (__any_sync(0xFFFFFFFFu, search)) {
#pragma unroll 1
                for (int q = 0; q < 4; ++q)
                    gr_defer(search_queue, searched, (search >> q) & 1u, r << 8 | (lane + 32 * q), search_entry);
            }
            // the row's pool statistics: this warp's alone (row r is always warp r % 8's)
            uint32_t lo = gr_float_key(mn), hi = gr_float_key(mx);
            gr_warp_extremes(lo, hi);
            if (lane == 0) {
                sh_min[r] = min(sh_min[r], lo);
                sh_max[r] = max(sh_max[r], hi);
            }
        }
        gr_flush(search_queue, searched, search_entry);  // before the next tile's factors overwrite the stage
        __syncthreads();  // the next tile's training bitmap and factors overwrite this one's
    }
    gr_drain(queue, queued, settle_entry);

    // pool statistics: row t's, folded into its user's (order keys of doubles, as every rank kernel's)
    if (t < n_rows) {
        atomicMin((unsigned long long*)&pool_min[b0 + t],
                  (unsigned long long)gr_order_key(gr_widen(gr_from_float_key(sh_min[t]))));
        atomicMax((unsigned long long*)&pool_max[b0 + t],
                  (unsigned long long)gr_order_key(gr_widen(gr_from_float_key(sh_max[t]))));
        if (sh_bad[t]) atomicOr(&nonfinite[b0 + t], 1);
    }
    if (in_shared) {
        __syncthreads();
        for (int i = t; i < (int)n_tests; i += FUSED_THREADS)
            if (const int32_t n = sh_cnt[i]) atomicAdd(&cnt[tb0 + i], n);
    }
}
