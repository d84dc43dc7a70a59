/*
 * zerojob is the launch benchmark's zero-work job. Its first instruction
 * reads the clock; it sends "<job id> <unix ns>\n" to $BENCH_STAMP_SOCKET
 * and exits.
 *
 * It is built without a C library (cc -nostdlib -static): the entry point is
 * _start and every call is a raw system call. Even a static glibc runs its
 * start-up before main (CPU feature and cache probing with cpuid, which a
 * virtual machine traps, tunables, the executable's own path), about 0.4 ms
 * of CPU per job on the 2-core VM the benchmark was tuned on; a Go program
 * spends about 3 ms in its runtime. Both are the job's cost, not the
 * launch's, and the first would also come before the "first instruction".
 */
#include <stddef.h>
#include <sys/syscall.h>

#define AF_UNIX 1
#define SOCK_STREAM 1
#define CLOCK_REALTIME 0

struct timespec_raw {
	long sec, nsec;
};

struct sockaddr_un_raw {
	unsigned short family;
	char path[108];
};

static long sys(long n, long a, long b, long c)
{
	long ret;
#if defined(__x86_64__)
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	ret = x0;
#else
#error "zerojob: only x86_64 and aarch64 are supported"
#endif
	return ret;
}

static __attribute__((noreturn)) void leave(int code)
{
	for (;;)
		sys(SYS_exit_group, code, 0, 0);
}

/* env returns the value of the environment variable name, or NULL. */
static const char *env(char **envp, const char *name)
{
	for (; *envp; envp++) {
		const char *e = *envp, *n = name;
		while (*n && *e == *n)
			e++, n++;
		if (*n == 0 && *e == '=')
			return e + 1;
	}
	return NULL;
}

static size_t length(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

/* decimal writes v in decimal at the end of buf (size 24) and returns where it starts. */
static char *decimal(char *end, unsigned long long v)
{
	do
		*--end = (char)('0' + v % 10);
	while (v /= 10);
	return end;
}

static void fail(const char *msg)
{
	sys(SYS_write, 2, (long)msg, (long)length(msg));
	leave(1);
}

/* start is called by _start with the process's initial stack: argc, argv, NULL, envp, NULL. */
__attribute__((used, noreturn)) static void start(long *stack)
{
	struct timespec_raw at;
	sys(SYS_clock_gettime, CLOCK_REALTIME, (long)&at, 0);

	char **envp = (char **)(stack + 1 + stack[0] + 1);
	const char *sock = env(envp, "BENCH_STAMP_SOCKET");
	const char *job = env(envp, "SIMPLETUNER_JOB_ID");
	if (sock == NULL || job == NULL)
		leave(0);

	struct sockaddr_un_raw addr;
	size_t n = length(sock);
	if (n >= sizeof addr.path)
		fail("zerojob: BENCH_STAMP_SOCKET is too long\n");
	addr.family = AF_UNIX;
	for (size_t i = 0; i <= n; i++)
		addr.path[i] = sock[i];

	char line[256], digits[24];
	size_t jl = length(job);
	char *d = decimal(digits + sizeof digits, (unsigned long long)at.sec * 1000000000ULL + (unsigned long long)at.nsec);
	size_t dl = (size_t)(digits + sizeof digits - d);
	if (jl + 1 + dl + 1 > sizeof line)
		fail("zerojob: SIMPLETUNER_JOB_ID is too long\n");
	size_t w = 0;
	for (size_t i = 0; i < jl; i++)
		line[w++] = job[i];
	line[w++] = ' ';
	for (size_t i = 0; i < dl; i++)
		line[w++] = d[i];
	line[w++] = '\n';

	long fd = sys(SYS_socket, AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || sys(SYS_connect, fd, (long)&addr, (long)(sizeof addr.family + n + 1)) != 0)
		fail("zerojob: cannot connect to BENCH_STAMP_SOCKET\n");
	if (sys(SYS_write, fd, (long)line, (long)w) != (long)w)
		fail("zerojob: cannot write the stamp\n");
	sys(SYS_close, fd, 0, 0);
	leave(0);
}

#if defined(__x86_64__)
__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall start\n\thlt\n");
#elif defined(__aarch64__)
__asm__(".globl _start\n_start:\n\tmov x0, sp\n\tbl start\n");
#endif
