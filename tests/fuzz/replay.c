/* replay.c - run a fuzz target over files and directories without libFuzzer.
 *
 * `make replay` links each target with this main() under ASan/UBSan and feeds
 * it every file of its committed corpus, so the regression inputs run in
 * `make sanitize` (and `make test`) in well under a second, with no fuzzer
 * runtime and no randomness. Exit status 0 only if at least one input ran and
 * none failed; a failure aborts, and the handlers below name the input first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Weak: present when built with a sanitizer (always, in the Makefile). ASan
 * and UBSan call it before they exit, so a report names the input too. SIGSEGV
 * is left to ASan's own handler. */
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static char current[4096];

/* Async-signal-safe: write(2) only. */
static void say_current(void)
{
	static const char pre[] = "replay: failing input: ";

	if (!current[0])
		return;
	if (write(2, pre, sizeof(pre) - 1) < 0 ||
	    write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0)
		return;
}

static void on_fatal_signal(int sig)
{
	say_current();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* A hang is a failure too: libFuzzer's -timeout is not here to catch it. */
#define PER_INPUT_TIMEOUT_S 30

static int run_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (!fp) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(fp, 0, SEEK_END) || (len = ftell(fp)) < 0 ||
	    fseek(fp, 0, SEEK_SET)) {
		fprintf(stderr, "replay: %s: cannot size\n", path);
		fclose(fp);
		return -1;
	}
	/* An exact-size copy: a read past the input's end is an ASan report,
	 * as it is under libFuzzer. */
	buf = malloc(len ? (size_t)len : 1);
	if (!buf || fread(buf, 1, (size_t)len, fp) != (size_t)len) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		free(buf);
		fclose(fp);
		return -1;
	}
	fclose(fp);
	snprintf(current, sizeof(current), "%s", path);
	alarm(PER_INPUT_TIMEOUT_S);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	alarm(0);
	current[0] = 0;
	free(buf);
	return 0;
}

static int not_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

/* Every regular file of dir, in name order (a stable, reproducible run). */
static int run_dir(const char *dir, long *count)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, not_hidden, alphasort), rc = 0;

	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
		if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(path))
				rc = -1;
			else
				(*count)++;
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	long count = 0;
	struct stat st;

	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(say_current);
	signal(SIGABRT, on_fatal_signal);
	signal(SIGALRM, on_fatal_signal);
	for (int i = 1; i < argc; i++) {
		if (stat(argv[i], &st)) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode) ? run_dir(argv[i], &count)
					: run_file(argv[i]) ? -1 : (count++, 0))
			return 1;
	}
	/* Like pytest's "no tests collected": an empty corpus is not a pass. */
	if (count == 0) {
		fprintf(stderr, "replay: no inputs found\n");
		return 1;
	}
	printf("%s: %ld inputs ok\n", argv[0], count);
	return 0;
}
