/*
 * zerojob is the launch benchmark's zero-work job. Its first instruction
 * reads the clock; it sends "<job id> <unix ns>\n" to $BENCH_STAMP_SOCKET
 * and exits. It is C, built static, so that what the benchmark measures is
 * the launch and not the start-up of a language runtime: a Go program spends
 * about 3 ms of CPU in its runtime before main runs, more than the launch
 * itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at);

	const char *sock = getenv("BENCH_STAMP_SOCKET");
	const char *job = getenv("SIMPLETUNER_JOB_ID");
	if (sock == NULL || job == NULL)
		return 0;

	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(sock) >= sizeof addr.sun_path) {
		fprintf(stderr, "zerojob: socket path too long: %s\n", sock);
		return 1;
	}
	strcpy(addr.sun_path, sock);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		perror("zerojob: connect");
		return 1;
	}
	char line[256];
	int n = snprintf(line, sizeof line, "%s %lld\n", job,
			 (long long)at.tv_sec * 1000000000LL + at.tv_nsec);
	if (n < 0 || n >= (int)sizeof line || write(fd, line, n) != n) {
		perror("zerojob: write");
		return 1;
	}
	close(fd);
	return 0;
}
