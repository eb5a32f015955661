/* DCQCN's reaction point (emulator/transport/dcqcn.py ReactionPoint) in C: the same rules, the
 * same floating-point expressions in the same order (compiled without fused multiply-add), so
 * that a queue pair whose controller runs here reads as the Python one bit for bit
 * (tests/unit/test_native_dcqcn.py drives both with the same CNPs, timers and bytes). The
 * rules and their sources are dcqcn.py's docstring; the parameters arrive as the doubles
 * Python computes from DcqcnParams (emulator/sim/native_dcqcn.py), never recomputed here. */
#include <math.h>
#include <stdint.h>

#include "simfab_api.h"
#include "simfab_core.h"

#define EPS 1e-9                   /* dcqcn.py _EPS: float slack when counting whole periods */
#define TIMER_SLACK_S (EPS * 1e-3) /* dcqcn.py _TIMER_SLACK_S */
#define NO_BYTE_BUDGET ((int64_t)1 << 62)

static void advance_alpha(fab_rp_t *rp, double now) {
    int64_t periods = (int64_t)((now - rp->alpha_epoch_s) / rp->alpha_period_s + EPS);
    if (periods <= 0) return;
    double g = rp->g, alpha = rp->alpha;
    int64_t left = periods;
    if (rp->cnp_in_period) {
        alpha = (1 - g) * alpha + g;
        rp->cnp_in_period = 0;
        left = periods - 1;
    }
    if (left) alpha *= pow(1 - g, (double)left);
    rp->alpha = alpha;
    rp->alpha_epoch_s += (double)periods * rp->alpha_period_s;
}

double rp_alpha_at(fab_rp_t *rp, double now) {
    if (rp->active) advance_alpha(rp, now);
    return rp->alpha;
}

/* the first rate-decrease check strictly after now */
static double next_check_after(const fab_rp_t *rp, double now) {
    double period = rp->decrease_period_s;
    if (period <= 0) return now;
    double k = floor((now - rp->decrease_epoch_s) / period + EPS) + 1;
    return rp->decrease_epoch_s + k * period;
}

static void decrease(fab_rp_t *rp, double at_s) {
    advance_alpha(rp, at_s);
    double current = rp->current_rate_bps;
    if (rp->clamp_tgt_rate || rp->increased_since_cut) rp->target_rate_bps = current;
    rp->increased_since_cut = 0;
    double floor_bps = py_max(current * rp->min_dec_fac / 100.0, rp->min_rate_bps);
    rp->current_rate_bps = py_max(current * (1 - rp->alpha / 2), floor_bps);
    rp->decrease_due_s = INFINITY;
    rp->timer_events = 0;
    rp->byte_events = 0;
    rp->bytes_since_reset = 0;
    rp->next_increase_s = at_s + rp->time_reset_s;
    rp->counting = 1;
    rp->last_reason = RP_CNP;
}

static void increase(fab_rp_t *rp) {
    int64_t t = rp->timer_events, bc = rp->byte_events, f = rp->threshold;
    if ((t > bc ? t : bc) <= f) {
        rp->last_reason = RP_FAST_RECOVERY;
    } else if ((t < bc ? t : bc) > f) {
        rp->target_rate_bps += rp->hai_bps;
        rp->last_reason = RP_HYPER_INCREASE;
    } else {
        rp->target_rate_bps += rp->ai_bps;
        rp->last_reason = RP_ADDITIVE_INCREASE;
    }
    double line = rp->line_rate_bps;
    rp->target_rate_bps = py_min(rp->target_rate_bps, line);
    rp->current_rate_bps = py_min((rp->target_rate_bps + rp->current_rate_bps) / 2, line);
    if (line - rp->current_rate_bps < py_max(rp->min_rate_bps, 1.0)) {
        /* back at line rate: the NIC releases the rate limiter */
        rp->current_rate_bps = rp->target_rate_bps = line;
        rp->active = 0;
        rp->counting = 0;
        rp->next_increase_s = INFINITY;
        rp->decrease_due_s = INFINITY;
    }
}

int rp_on_timer(fab_rp_t *rp, double now) {
    int changed = 0;
    double slack = TIMER_SLACK_S;
    while (rp->active) {
        double cut_s = rp->decrease_due_s, inc_s = rp->next_increase_s;
        if (cut_s <= inc_s && now + slack >= cut_s) {
            decrease(rp, cut_s);
        } else if (now + slack >= inc_s) {
            rp->next_increase_s += rp->time_reset_s;
            rp->timer_events++;
            if (rp->clamp_after_time_inc) rp->increased_since_cut = 1;
            increase(rp);
        } else {
            break;
        }
        changed = 1;
    }
    return changed;
}

int rp_on_cnp(fab_rp_t *rp, double now) {
    int changed = 0;
    if (!rp->active) {
        rp->active = 1;
        rp->alpha = rp->initial_alpha;
        rp->alpha_epoch_s = now;
        rp->cnp_in_period = 0;
        rp->decrease_epoch_s = now;
        rp->increased_since_cut = 0;
        rp->counting = 0;
        rp->timer_events = rp->byte_events = rp->bytes_since_reset = 0;
        rp->next_increase_s = INFINITY;
        if (rp->has_first_cnp_rate) {
            rp->current_rate_bps = rp->target_rate_bps = rp->first_cnp_rate_bps;
            rp->last_reason = RP_FIRST_CNP;
            changed = 1;
        }
    } else {
        advance_alpha(rp, now);
        rp->cnp_in_period = 1;
    }
    if (rp->decrease_due_s == INFINITY) {
        rp->decrease_due_s = next_check_after(rp, now);
        if (rp->decrease_due_s <= now) { /* no monitor period: cut at once */
            decrease(rp, now);
            changed = 1;
        }
    }
    return changed;
}

int rp_on_bytes_sent(fab_rp_t *rp, double now, int64_t size_bytes) {
    if (!rp->active) return 0;
    int changed = rp_on_timer(rp, now); /* a cut or increase due first restarts the counter */
    if (!rp->counting) return changed;
    rp->bytes_since_reset += size_bytes;
    int64_t reset = rp->byte_reset_bytes;
    while (rp->counting && rp->bytes_since_reset >= reset) {
        rp->bytes_since_reset -= reset;
        rp->byte_events++;
        rp->increased_since_cut = 1;
        increase(rp);
        changed = 1;
    }
    return changed;
}

/* next_deadline_s: INFINITY for None (inactive) */
double rp_next_deadline(const fab_rp_t *rp) {
    if (!rp->active) return INFINITY;
    return py_min(rp->decrease_due_s, rp->next_increase_s);
}

/* quiet(): the deadline, its slack and the byte budget inside which sending changes nothing
 * but the byte count */
void rp_quiet(const fab_rp_t *rp, double *deadline_s, double *slack_s, int64_t *budget) {
    if (!rp->active) {
        *deadline_s = INFINITY;
        *slack_s = 0.0;
        *budget = NO_BYTE_BUDGET;
        return;
    }
    *deadline_s = py_min(rp->decrease_due_s, rp->next_increase_s);
    *slack_s = TIMER_SLACK_S;
    *budget = rp->counting ? rp->byte_reset_bytes - rp->bytes_since_reset : NO_BYTE_BUDGET;
}

void rp_count_quiet_bytes(fab_rp_t *rp, int64_t size_bytes) {
    if (rp->active && rp->counting) rp->bytes_since_reset += size_bytes;
}
