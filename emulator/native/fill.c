/* Max-min progressive filling over path classes, the planner's hot loop
 * (emulator/schedule/fluid.py FluidNetwork._fill_numpy is the same algorithm in numpy and the
 * fallback; tests/unit/test_native_fill.py holds the two to the same bits).
 *
 * Bertsekas & Gallager, Data Networks, 6.5.2: the links whose fair share (capacity left /
 * members left) is the smallest fix the rate of every class crossing them; repeat. numpy scans
 * the whole incidence at every level; here each link keeps its classes and each class its
 * links, so a level costs the open links plus the incidences of the classes it fixes. The sums
 * are taken in the incidence's order, as numpy's bincount takes them (the incidence is sorted
 * by class, so a level's classes in ascending order visit each link's entries in that order),
 * so the rates are identical.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* inc_class/inc_link/weight: the incidence (n_inc entries, sorted by class: class crosses link,
 * with the class's members); capacity: bytes/s of each of n_links links; fixed: one byte per
 * class, nonzero for a class whose rate is not to be set (dead), updated; rate: each newly fixed
 * class's rate. tie: links within this relative distance of the smallest share tie with it;
 * min_share: the floor of a rate. Returns the number of levels, -1 when out of memory, -2 when
 * the incidence is not sorted by class. */
long fill_rates(long n_inc, const int64_t *inc_class, const int64_t *inc_link,
                const double *weight, long n_links, const double *capacity, long n_classes,
                uint8_t *fixed, double *rate, double tie, double min_share)
{
    long levels = 0;
    for (long i = 1; i < n_inc; i++)
        if (inc_class[i] < inc_class[i - 1])
            return -2;
    size_t nl = n_links ? n_links : 1, nc = n_classes ? n_classes : 1, ni = n_inc ? n_inc : 1;
    double *remaining = malloc(sizeof(double) * nl);
    double *count = malloc(sizeof(double) * nl);
    double *sub_rem = calloc(nl, sizeof(double));
    double *sub_cnt = calloc(nl, sizeof(double));
    int64_t *open = malloc(sizeof(int64_t) * nl);      /* links still open */
    int64_t *touched = malloc(sizeof(int64_t) * nl);   /* links a level's classes cross */
    uint8_t *is_touched = calloc(nl, 1);
    uint8_t *bottleneck = calloc(nl, 1);
    int64_t *link_start = calloc(nl + 1, sizeof(int64_t)); /* link -> its entries (CSR) */
    int64_t *link_entry = malloc(sizeof(int64_t) * ni);
    int64_t *class_start = malloc(sizeof(int64_t) * (nc + 1)); /* class -> its entries */
    int64_t *level_classes = malloc(sizeof(int64_t) * nc);
    uint8_t *taken = calloc(nc, 1);
    if (!remaining || !count || !sub_rem || !sub_cnt || !open || !touched || !is_touched ||
        !bottleneck || !link_start || !link_entry || !class_start || !level_classes || !taken) {
        levels = -1;
        goto out;
    }
    memcpy(remaining, capacity, sizeof(double) * n_links);
    memset(count, 0, sizeof(double) * n_links);
    for (long i = 0; i < n_inc; i++) {
        count[inc_link[i]] += weight[i];
        link_start[inc_link[i] + 1]++;
    }
    for (long l = 0; l < n_links; l++)
        link_start[l + 1] += link_start[l];
    {
        int64_t *fill_at = touched; /* scratch: the next free slot of each link */
        for (long l = 0; l < n_links; l++)
            fill_at[l] = link_start[l];
        for (long i = 0; i < n_inc; i++)
            link_entry[fill_at[inc_link[i]]++] = i;
    }
    for (long c = 0, i = 0; c <= n_classes; c++) {
        while (i < n_inc && inc_class[i] < c)
            i++;
        class_start[c] = i;
    }
    long n_open = 0;
    for (long l = 0; l < n_links; l++)
        if (count[l] > 0.5) /* member counts are whole numbers */
            open[n_open++] = l;
    while (n_open > 0) {
        levels++;
        double level = INFINITY;
        for (long k = 0; k < n_open; k++) {
            long l = open[k];
            double share = remaining[l] / count[l];
            if (share < level)
                level = share;
        }
        double bound = level + fabs(level) * tie;
        /* the classes crossing a bottleneck link are fixed at this level */
        long n_level = 0;
        for (long k = 0; k < n_open; k++) {
            long l = open[k];
            if (remaining[l] / count[l] <= bound) {
                bottleneck[l] = 1;
                for (int64_t e = link_start[l]; e < link_start[l + 1]; e++) {
                    int64_t c = inc_class[link_entry[e]];
                    if (!fixed[c] && !taken[c]) {
                        taken[c] = 1;
                        level_classes[n_level++] = c;
                    }
                }
            }
        }
        qsort(level_classes, n_level, sizeof(int64_t), cmp_i64);
        double r = level > min_share ? level : min_share;
        long n_touched = 0;
        for (long k = 0; k < n_level; k++) {
            int64_t c = level_classes[k];
            rate[c] = r;
            fixed[c] = 1;
            taken[c] = 0;
            for (int64_t i = class_start[c]; i < class_start[c + 1]; i++) {
                int64_t l = inc_link[i];
                sub_rem[l] += r * weight[i];
                sub_cnt[l] += weight[i];
                if (!is_touched[l]) {
                    is_touched[l] = 1;
                    touched[n_touched++] = l;
                }
            }
        }
        for (long k = 0; k < n_touched; k++) {
            long l = touched[k];
            remaining[l] -= sub_rem[l];
            count[l] -= sub_cnt[l];
            sub_rem[l] = sub_cnt[l] = 0.0;
            is_touched[l] = 0;
        }
        long kept = 0;
        for (long k = 0; k < n_open; k++) {
            long l = open[k];
            if (bottleneck[l]) { /* settled even if float noise left it a member */
                count[l] = 0.0;
                bottleneck[l] = 0;
            } else if (count[l] > 0.5) {
                open[kept++] = l;
            }
        }
        n_open = kept;
    }
out:
    free(remaining);
    free(count);
    free(sub_rem);
    free(sub_cnt);
    free(open);
    free(touched);
    free(is_touched);
    free(bottleneck);
    free(link_start);
    free(link_entry);
    free(class_start);
    free(level_classes);
    free(taken);
    return levels;
}
