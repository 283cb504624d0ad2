/* A TCP loopback pair in one process, moving a known number of bytes with
 * send(2) and recv(2), the syscalls NCCL's socket transport uses. Used by
 * the attach tests as a real socket workload (no stand-in: real sockets).
 *
 *   sock_pair GO_FILE MIB    waits until GO_FILE exists, sends MIB MiB from
 *                            a thread, receives them here, prints the totals.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static long mib;
static int out_fd;
static long sent;

static void *sender(void *arg) {
    (void)arg;
    static char buf[1 << 20];
    memset(buf, 'x', sizeof buf);
    for (long i = 0; i < mib; i++) {
        size_t off = 0;
        while (off < sizeof buf) {
            ssize_t n = send(out_fd, buf + off, sizeof buf - off, 0);
            if (n <= 0) { perror("send"); exit(1); }
            off += (size_t)n;
            sent += n;
        }
    }
    shutdown(out_fd, SHUT_WR);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: sock_pair GO_FILE MIB\n"); return 2; }
    mib = atol(argv[2]);
    while (access(argv[1], F_OK) != 0) usleep(20000);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)&a, &len)) {
        perror("listen"); return 1;
    }
    out_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(out_fd, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
    int in_fd = accept(lfd, NULL, NULL);
    pthread_t t;
    pthread_create(&t, NULL, sender, NULL);
    static char buf[1 << 16];
    long got = 0;
    for (;;) {
        ssize_t n = recv(in_fd, buf, sizeof buf, 0);
        if (n < 0) { perror("recv"); return 1; }
        if (n == 0) break;
        got += n;
    }
    pthread_join(t, NULL);
    printf("sent %ld received %ld\n", sent, got);
    return got == mib * (1 << 20) ? 0 : 1;
}
