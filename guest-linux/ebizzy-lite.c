/*
 * ebizzy-lite: ebizzy -M-like allocation (ipivmm's linux:ebizzy,
 * docs/linux-guest.md): a thread per CPU, each allocating a 1 MiB buffer
 * with mmap, filling it, searching it and unmapping it, over and over. As
 * in the AVIC report's ebizzy runs, every munmap flushes the buffer from
 * the TLBs of the other CPUs running the process, a function-call IPI to
 * all of them (the all-but-self shorthand when that is every other CPU).
 * Not ebizzy itself (Debian does not ship it): its allocation pattern.
 *   ebizzy-lite N      N buffers per thread; records "records" (all threads)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static long n;
static volatile uint64_t found;

static void *worker(void *arg)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET((int)(intptr_t)arg, &s);
	sched_setaffinity(0, sizeof(s), &s);
	for (long i = 0; i < n; i++) {
		char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return (void *)1;
		memset(p, (int)i, CHUNK);
		found += memchr(p, (int)(i + 1), CHUNK) == NULL;
		munmap(p, CHUNK);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	n = argc > 1 ? atol(argv[1]) : 100;
	int ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t t[1024];
	const char *rpath = getenv("IPIVMM_RECORDS");
	if (n < 1 || ncpus < 1 || ncpus > 1024) {
		fprintf(stderr, "ebizzy-lite: need N >= 1\n");
		return 2;
	}
	for (int c = 0; c < ncpus; c++)
		pthread_create(&t[c], NULL, worker, (void *)(intptr_t)c);
	int failed = 0;
	for (int c = 0; c < ncpus; c++) {
		void *r;
		pthread_join(t[c], &r);
		failed |= r != NULL;
	}
	FILE *r = rpath ? fopen(rpath, "a") : NULL;
	if (r) {
		fprintf(r, "operations %ld\n", n * ncpus);
		fclose(r);
	}
	return failed;
}
