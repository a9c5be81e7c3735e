/*
 * The MPI calls of arl's data-parallel trainer (src/dist/mpi.rs), compiled by
 * build.rs with the flags of `mpicc --showme` (feature `mpi`).
 *
 * Why a C shim and not bindings: MPI's handles (MPI_Comm, MPI_Datatype) are
 * macros whose values differ between MPI implementations, so Rust cannot
 * name them without a binding generator (rsmpi needs libclang at build
 * time). These few functions take plain C types instead.
 *
 * Every collective is the non-blocking MPI call (MPI_Iallreduce, MPI_Ibcast,
 * MPI_Ibarrier) followed by a test loop with a deadline, so that a rank that
 * hangs cannot hang the others forever. While waiting, a rank answers
 * "which collective are you in?" queries from its peers; when its own
 * deadline passes it asks every peer the same and reports those that did
 * not answer, or answered with an earlier collective, as not arrived.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_QUERY = 7301, TAG_REPLY = 7302 };

static int g_rank = 0;
static int g_size = 1;
/* Number of the collective this rank is in or last completed (1-based). */
static int g_seq = 0;

int arl_mpi_init(int *rank, int *size) {
    int provided = 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            return 1;
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    *rank = g_rank;
    *size = g_size;
    return 0;
}

int arl_mpi_finalize(void) { return MPI_Finalize() == MPI_SUCCESS ? 0 : 1; }

/* Ends every process of the job with `code`. If MPI_Abort itself does not
 * return or kill us within 10 s, SIGALRM's default action does. */
void arl_mpi_abort(int code) {
    alarm(10);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

static void nap(long spins) {
    if (spins < 200) {
        return;
    }
    struct timespec ts = {0, spins < 2000 ? 20000L : 500000L};
    nanosleep(&ts, NULL);
}

/* Replies to every pending query with the number of this rank's collective. */
static void answer_queries(void) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, MPI_COMM_WORLD, &flag, &st);
        if (!flag) {
            return;
        }
        int asked = 0;
        MPI_Recv(&asked, 1, MPI_INT, st.MPI_SOURCE, TAG_QUERY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int seq = g_seq;
        MPI_Send(&seq, 1, MPI_INT, st.MPI_SOURCE, TAG_REPLY, MPI_COMM_WORLD);
    }
}

/* After a timeout: which peers are not in collective `g_seq`? Fills
 * `missing` (room for g_size entries) and returns how many. */
static int find_missing(int *missing, double grace_s) {
    int *seen = calloc((size_t)g_size, sizeof(int));
    int *their = calloc((size_t)g_size, sizeof(int));
    MPI_Request *reqs = calloc((size_t)g_size, sizeof(MPI_Request));
    if (!seen || !their || !reqs) {
        free(seen);
        free(their);
        free(reqs);
        return 0;
    }
    int mine = g_seq;
    for (int j = 0; j < g_size; j++) {
        reqs[j] = MPI_REQUEST_NULL;
        if (j != g_rank) {
            MPI_Isend(&mine, 1, MPI_INT, j, TAG_QUERY, MPI_COMM_WORLD, &reqs[j]);
        }
    }
    int answered = 1;
    seen[g_rank] = 1;
    their[g_rank] = mine;
    double t0 = MPI_Wtime();
    long spins = 0;
    while (answered < g_size && MPI_Wtime() - t0 < grace_s) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_REPLY, MPI_COMM_WORLD, &flag, &st);
        if (flag) {
            int v = 0;
            MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, TAG_REPLY, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (!seen[st.MPI_SOURCE]) {
                seen[st.MPI_SOURCE] = 1;
                their[st.MPI_SOURCE] = v;
                answered++;
            }
            spins = 0;
            continue;
        }
        answer_queries();
        nap(++spins);
    }
    int n = 0;
    for (int j = 0; j < g_size; j++) {
        if (!seen[j] || their[j] < mine) {
            missing[n++] = j;
        }
    }
    /* The query sends of peers that never answer stay pending: we abort next. */
    free(seen);
    free(their);
    free(reqs);
    return n;
}

/* Waits for `req`; 0 when done, 1 on timeout with the lost ranks in `missing`. */
static int wait_req(MPI_Request *req, double timeout_s, int *missing, int *nmissing) {
    double t0 = MPI_Wtime();
    long spins = 0;
    for (;;) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) {
            *nmissing = 0;
            return 0;
        }
        answer_queries();
        if (timeout_s > 0 && MPI_Wtime() - t0 > timeout_s) {
            break;
        }
        nap(++spins);
    }
    double grace = timeout_s / 4;
    grace = grace < 1 ? 1 : grace > 5 ? 5 : grace;
    *nmissing = find_missing(missing, grace);
    return 1;
}

static MPI_Datatype dtype_of(int dtype) {
    switch (dtype) {
    case 0:
        return MPI_FLOAT;
    case 1:
        return MPI_DOUBLE;
    default:
        return MPI_BYTE;
    }
}

/* In-place all-reduce of `count` elements (dtype 0 f32, 1 f64; op 0 sum,
 * 1 max). Returns 0, 1 on timeout (see wait_req), 2 on a bad argument. */
int arl_mpi_allreduce(void *buf, int count, int dtype, int op, double timeout_s, int *missing, int *nmissing) {
    if (dtype < 0 || dtype > 1 || op < 0 || op > 1) {
        return 2;
    }
    g_seq++;
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, buf, count, dtype_of(dtype), op == 0 ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD, &req);
    return wait_req(&req, timeout_s, missing, nmissing);
}

/* Broadcast of `count` bytes from `root`. */
int arl_mpi_bcast(void *buf, int count, int root, double timeout_s, int *missing, int *nmissing) {
    g_seq++;
    MPI_Request req;
    MPI_Ibcast(buf, count, MPI_BYTE, root, MPI_COMM_WORLD, &req);
    return wait_req(&req, timeout_s, missing, nmissing);
}

/* In-place all-gather of float32 parts: rank r's `counts[r]` elements sit at
 * `displs[r]` of `buf` (which holds them all); afterwards every rank has every
 * part. */
int arl_mpi_allgatherv(float *buf, const int *counts, const int *displs, double timeout_s, int *missing,
                       int *nmissing) {
    g_seq++;
    MPI_Request req;
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD, &req);
    return wait_req(&req, timeout_s, missing, nmissing);
}

/* Element-wise sum over ranks of `buf` (every rank's whole buffer), scattered:
 * rank r receives the sum of its `counts[r]` elements, written back at
 * `displs[r]` of its `buf`; the rest of `buf` is left undefined. */
int arl_mpi_reduce_scatter(float *buf, const int *counts, const int *displs, double timeout_s, int *missing,
                           int *nmissing) {
    g_seq++;
    MPI_Request req;
    /* In place: the input is the whole receive buffer, this rank's result
     * lands at its start. */
    MPI_Ireduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    int rc = wait_req(&req, timeout_s, missing, nmissing);
    if (rc == 0 && displs[g_rank] != 0) {
        memmove(buf + displs[g_rank], buf, (size_t)counts[g_rank] * sizeof(float));
    }
    return rc;
}

int arl_mpi_barrier(double timeout_s, int *missing, int *nmissing) {
    g_seq++;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return wait_req(&req, timeout_s, missing, nmissing);
}

/* The number of the current (or last) collective, for error messages. */
int arl_mpi_seq(void) { return g_seq; }
