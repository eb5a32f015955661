/* simfab_rqp.c's table of receive queue pairs, kept inside simfab.c's fabric (not Python's:
 * Python reads a queue pair through fab_rqp and the dirty list). */
typedef struct {
    fab_rqp_t *q;
    int32_t n; /* slots: QP numbers 0..n-1 */
    int32_t *dirty;
    int64_t n_dirty, cap_dirty;
} rqp_table_t;

fab_rqp_t *rqp_slot(rqp_table_t *t, int32_t qpn);
int rqp_take(rqp_table_t *t, int32_t qpn, int32_t host, uint32_t psn, int32_t data_flags,
             int32_t ce, int32_t payload_bytes, double now);
void rqp_free(rqp_table_t *t);
