// The body of fused_rank.cu's kernels, included there once for each: the kernel GR_FUSED_KERNEL
// whose tile is scored as GR_FUSED_TILE says (FmaTile, TensorTileOf<16>). A kernel, not a function the
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
    __shared__ Tile::Factors tile_factors;
    __shared__ uint32_t train_bits[FUSED_USERS][FUSED_ITEMS / 32];
    __shared__ uint32_t sh_cnt[FUSED_WORDS];  // the rows' counts, two rows a word (row_counts)
    __shared__ int32_t sh_word[FUSED_USERS];  // row r's first word
    __shared__ int64_t sh_words;  // the words the rows need
    __shared__ uint8_t sh_cells[FUSED_USERS][GR_CELLS];  // row r's cells (bands.cuh)
    __shared__ float sh_scale[FUSED_USERS];  // their scale (gr_cells_scale)
    __shared__ float sh_worst[FUSED_USERS];
    __shared__ int64_t sh_first[FUSED_USERS + 1];  // row r's test entries: tb0 + sh_first[r] .. tb0 + sh_first[r + 1]
    __shared__ float sh_bias[FUSED_ITEMS];
    __shared__ int32_t warp_queue[FUSED_THREADS / 32][GR_QUEUE];

    // U: the batch's factors, row b for batch row b (user users[b]); block rows b0 .. b0 + n_rows - 1
    const int64_t b0 = (int64_t)blockIdx.x * FUSED_USERS;
    const int64_t span_begin = (int64_t)blockIdx.y * span;
    if (b0 >= nb || span_begin >= n_items) return;
    const int64_t span_end = min(n_items, span_begin + span);
    const int64_t n_rows = min((int64_t)FUSED_USERS, nb - b0);
    const int64_t tb0 = tests_begin[b0], n_tests = tests_begin[b0 + n_rows] - tb0;
    const int t = threadIdx.x;
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
    }
    __syncthreads();
    if (t == 0) {  // rows 2p and 2p + 1 share words: as many as the larger needs
        int64_t w = 0;
        for (int r = 0; r < FUSED_USERS; r += 2) {
            sh_word[r] = sh_word[r + 1] = (int32_t)min(w, (int64_t)FUSED_WORDS);  // (used only where all fit)
            w += max(sh_first[r + 1] - sh_first[r], sh_first[r + 2] - sh_first[r + 1]);
        }
        sh_words = w;
    }
    {  // row t >> 1's cells, half of them each: read once the tiles are scored (gr_score_tile's barriers)
        const int r = t >> 1;
        const int64_t first = sh_first[r];
        const int m = (int)(sh_first[r + 1] - first);
        const GlobalBands<float> bands = bands_of(r, first, m);
        for (int k = (t & 1) * (GR_CELLS / 2); k < (t & 1 ? GR_CELLS : GR_CELLS / 2); ++k)
            sh_cells[r][k] = gr_cell_entry(bands, m, sh_worst[r], sh_scale[r], (float)(GR_CELLS - 1), k);
    }
    __syncthreads();
    const bool in_shared = sh_words <= FUSED_WORDS;  // the block's counts in shared memory, else in cnt
    if (in_shared)
        for (int i = t; i < (int)sh_words; i += FUSED_THREADS) sh_cnt[i] = 0;  // (gr_score_tile's barriers publish)

    const auto settle_entry = [&](int32_t entry) {
        settle(entry, b0, span_begin, U, B, n_factors, bias, users, tests_begin, test_scores, test_keys, seed, noise,
               in_shared ? sh_cnt : nullptr, sh_word, cnt);
    };
    int32_t* queue = warp_queue[t >> 5];
    int queued = 0;  // the same in every lane of the warp
    int bad = 0;  // bit rho: a pool score of tile.row(rho) is not finite
    // the pool's minimum and maximum filter score of this thread's items of round rho (local
    // memory: the rounds' loop indexes them), merged over the row's lanes once, at the end
    float row_min[Tile::ROUNDS], row_max[Tile::ROUNDS];
#pragma unroll
    for (int i = 0; i < Tile::ROUNDS; ++i) row_min[i] = (float)GR_INF, row_max[i] = -(float)GR_INF;

    // thread t loads the factors of row t >> 1 (both tiles' loaders; which items it loads is the tile's)
    const int lr = t >> 1;
    const float* a_row = lr < n_rows ? U + (b0 + lr) * n_factors : nullptr;
    for (int64_t j0 = span_begin; j0 < span_end; j0 += FUSED_ITEMS) {
        if (t < FUSED_USERS) gr_tile_prepare<Tile>(training, j0, span_end, bias, train_bits[t], sh_bias);
        // this thread's 64 scores, biases added (in float, as rank_tile does), in local memory for
        // the loops below to index: the tile's registers are free while the scores are counted
        float scores[Tile::ROUNDS][Tile::ITEMS];
        tile.score(tile_factors, a_row, B, j0, span_end, n_factors, bias ? sh_bias : nullptr, scores);
#pragma unroll 1
        for (int i = 0; i < Tile::ROUNDS; ++i) {  // round i; every lane the same rounds: the warp's votes below
            const int r = tile.row(i);
            const int64_t first = sh_first[r];
            const int m = (int)(sh_first[r + 1] - first), top = gr_search_top(m);  // a user's: distinct items
            const uint32_t pool = r < n_rows ? tile.pool(train_bits[r], i, j0, span_end) : 0u;  // bit j: tile.col(i, j)
            const GlobalBands<float> bands = bands_of(r, first, m);
            const float worst = sh_worst[r];
            const Cells<float> cells = gr_cells<float>(sh_cells[r], sh_scale[r], GR_CELLS);
            const HalfCounts counts = row_counts(sh_cnt, sh_word, r);  // (where in_shared)
            float mn = (float)GR_INF, mx = -(float)GR_INF;
            float nonfinite_sum = 0.0f;  // NaN once a pool score of the row is not finite (s * 0 is NaN exactly then)
            const auto add = [&](int c) {  // an item counted at place c
                if (in_shared) gr_add_count(counts, c);  // the same in the whole block: shared-memory atomics
                else gr_add_count(cnt + tb0 + first, c);
            };
            uint32_t search = 0;  // bit j: tile.col(i, j)'s cell does not place it
#pragma unroll
            for (int j = 0; j < Tile::ITEMS; ++j) {
                if ((pool >> j) & 1u) {
                    const float s = scores[i][j];
                    mn = fmin(mn, s);
                    mx = fmax(mx, s);
                    nonfinite_sum = gr_fmaf(s, 0.0f, nonfinite_sum);  // (not flushed: no .ftz FMA in this kernel)
                    const int e = gr_place_cell(cells, worst, s);
                    if (e < GR_CELL_NOWHERE) add(e);
                    if (e > GR_CELL_NOWHERE) search |= 1u << j;
                }
            }
            bad |= (int)isnan(nonfinite_sum) << i;
            // bit j: tile.col(i, j) waits for its defined score
            uint32_t defer = gr_search_round(
                search, [&](int j) { return scores[i][j]; },
                [&](float s) { return gr_place(bands, m, top, worst, s); }, add, [](float) {});
            // a deferred item against its own bound first: p n_j + q (score_tolerance's item terms,
            // n_j its norm), where that is below the row's; what it places, it counts as the
            // defined score would (it lies strictly between the same test items), without computing it
            for (uint32_t pending = defer; pending; pending &= pending - 1u) {
                const int j = __ffs((int)pending) - 1;
                const float s = scores[i][j];
                const double own = fma(item_terms[b0 + r], item_norm[j0 + tile.col(i, j)], item_terms[nb + b0 + r]);
                if (!isfinite(s) || !(own < tol[b0 + r])) continue;  // (NaN or inf terms: not a bound to use)
                const GlobalBands<float> mine{test_scores + tb0 + first, own};
                const int c = gr_place(mine, m, top, mine.low(m - 1), s);
                if (c == GR_DEFER) continue;
                if (c >= 0) add(c);
                defer &= ~(1u << j);
            }
            if (__any_sync(0xFFFFFFFFu, defer)) {  // rare: the row's deferred items join the warp's queue
#pragma unroll 1
                for (int j = 0; j < Tile::ITEMS; ++j)  // every lane the same rounds: the warp's votes
                    gr_defer(queue, queued, (defer >> j) & 1u,
                             (r << FUSED_ITEM_BITS) | (int32_t)(j0 + tile.col(i, j) - span_begin), settle_entry);
            }
            row_min[i] = fmin(row_min[i], mn);
            row_max[i] = fmax(row_max[i], mx);
        }
        __syncthreads();  // the next tile's training bitmap and factors overwrite this one's
    }
    gr_drain(queue, queued, settle_entry);

    // pool statistics: row(i)'s non-finite flag, minimum and maximum, from the lanes that share it
#pragma unroll
    for (int i = 0; i < Tile::ROUNDS; ++i) {
        const int r = tile.row(i);
        int flag = (bad >> i) & 1;
        float mn = row_min[i], mx = row_max[i];
        for (int off = 16; off > 0; off >>= 1) {  // over the row's lanes
            if (!(Tile::SHARE_MASK & off)) continue;
            flag |= __shfl_xor_sync(0xFFFFFFFFu, flag, off);
            mn = fmin(mn, __shfl_xor_sync(0xFFFFFFFFu, mn, off));
            mx = fmax(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
        }
        if ((t & Tile::SHARE_MASK) == 0 && r < n_rows) {  // row r is these lanes' alone, the first writes
            atomicMin((unsigned long long*)&pool_min[b0 + r], (unsigned long long)gr_order_key(gr_widen(mn)));
            atomicMax((unsigned long long*)&pool_max[b0 + r], (unsigned long long)gr_order_key(gr_widen(mx)));
            if (flag) atomicOr(&nonfinite[b0 + r], 1);
        }
    }
    if (in_shared) {  // a warp a row, a lane a test item
        __syncthreads();
        for (int r = t >> 5; r < FUSED_USERS; r += FUSED_THREADS / 32) {
            const int64_t first = sh_first[r], m = sh_first[r + 1] - first;
            for (int64_t i = t & 31; i < m; i += 32)
                if (const uint32_t n = gr_half_count(row_counts(sh_cnt, sh_word, r), i))
                    atomicAdd(&cnt[tb0 + first + i], (int32_t)n);
        }
    }
}
