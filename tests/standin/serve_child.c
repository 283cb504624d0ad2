/* A process `gdrtrace serve` must find, trace and forget (tests/tests/serve.rs,
 * `cargo xtask bench --only soak`): it links libibverbs, so the dynamic
 * loader's open of libibverbs.so.1 makes it a target, and it sends one UDP
 * datagram to the discard port, a traced syscall that leaves a row in the
 * kernel's aggregation table. With an argument it then sleeps that many
 * seconds (a long-lived target). With SERVE_CHILD_QUIET set it sends
 * nothing: a target that moves no byte (as a loader that maps libcuda and
 * exits), which the agent tracks but gives no series of its own. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* Taking the address keeps libibverbs in the link under --as-needed. */
void *volatile keep_libibverbs = (void *)ibv_get_device_list;

int main(int argc, char **argv) {
    int s = getenv("SERVE_CHILD_QUIET") ? -1 : socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0) {
        sendto(s, "x", 1, 0, (struct sockaddr *)&to, sizeof to);
        close(s);
    }
    if (argc > 1)
        sleep((unsigned)atoi(argv[1]));
    return 0;
}
