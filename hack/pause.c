/*
 * pause: the sandbox ("infra") container of every pod in the local test cluster.
 * It holds the pod's namespaces open and does nothing else:
 *   - sleeps in pause() forever,
 *   - reaps zombies on SIGCHLD (it is PID 1 of the pod when the PID namespace is shared),
 *   - exits 0 on SIGTERM/SIGINT so the runtime can stop it without waiting for SIGKILL.
 * Built static (gcc -static) so the image holds this one file and nothing else.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
	(void)sig;
	_exit(0);
}

static void on_chld(int sig) {
	(void)sig;
	/* Reap every exited child; WNOHANG so the handler never blocks. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("pause (shared-resource-csi local cluster)");
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "pause: warning: not PID 1\n");

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);

	sa.sa_handler = on_term;
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
		return 1;

	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		return 2;

	for (;;)
		pause();
	/* not reached */
	return 42;
}
