package isolation

// The gate without the Go runtime: in a binary built with cgo and glibc,
// this constructor runs before the Go runtime starts (glibc calls it with
// argc, argv and envp, as runc's nsexec is called). When the process is a
// gate (argv[1] is GateArg) it waits for workerd's word on fd 3 and executes
// the trainer, so a gated job pays for the dynamic loader and one read, not
// for the Go runtime and every package's initialisation. Anywhere else it
// returns at once and RunGate, in Go, is the gate.

/*
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define SIMPLETUNER_GATE_ARG "__job-gate"

static void simpletuner_gate_say(const char *a, const char *b, const char *c, const char *d) {
	const char *parts[] = {"simpletuner-workerd: ", a, b, c, d, "\n"};
	for (int i = 0; i < 6; i++) {
		if (parts[i] != NULL && write(2, parts[i], strlen(parts[i])) < 0) {
			return;
		}
	}
}

#ifdef __GLIBC__
__attribute__((constructor)) static void simpletuner_gate(int argc, char **argv, char **envp) {
	if (argc < 2 || argv == NULL || argv[1] == NULL || strcmp(argv[1], SIMPLETUNER_GATE_ARG) != 0) {
		return;
	}
	if (argc < 4) {
		simpletuner_gate_say(SIMPLETUNER_GATE_ARG ": want the trainer's path and argv", NULL, NULL, NULL);
		_exit(2);
	}
	char word;
	ssize_t n;
	do {
		n = read(3, &word, 1);
	} while (n < 0 && errno == EINTR);
	if (n != 1) {
		simpletuner_gate_say("the job was abandoned before it started", NULL, NULL, NULL);
		_exit(1);
	}
	close(3);
	execve(argv[2], argv + 3, envp);
	simpletuner_gate_say("cannot start ", argv[2], ": ", strerror(errno));
	_exit(127);
}
static int simpletuner_gate_in_c(void) { return 1; }
#else
static int simpletuner_gate_in_c(void) { return 0; }
#endif
*/
import "C"

// cGate is the argument the C gate answers to, and whether this build has
// it (cgo with glibc).
func cGate() (arg string, inC bool) {
	return C.SIMPLETUNER_GATE_ARG, C.simpletuner_gate_in_c() == 1
}
