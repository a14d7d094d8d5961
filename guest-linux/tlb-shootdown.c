/*
 * tlb-shootdown: TLB shootdown IPIs of one address space (ipivmm's
 * linux:tlb-shootdown, docs/linux-guest.md). A thread on every CPU but 0
 * spins in this process's address space, so each of those CPUs has it
 * loaded; CPU 0 maps a page, touches it and unmaps it N times: every
 * munmap must flush the page from the other CPUs' TLBs, which Linux does
 * with a function-call IPI to them (counted as CAL and TLB).
 *   tlb-shootdown N      N operations; TSC cycles of each munmap as samples
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>

static volatile int stop;

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof(s), &s);
}

static void *spinner(void *arg)
{
	pin((int)(intptr_t)arg);
	while (!stop)
		__asm__ volatile("pause" ::: "memory");
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	int ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t t[1024];
	const char *spath = getenv("IPIVMM_SAMPLES"), *rpath = getenv("IPIVMM_RECORDS");
	FILE *out = spath ? fopen(spath, "wb") : NULL;
	if (n < 1 || ncpus < 2 || ncpus > 1024) {
		fprintf(stderr, "tlb-shootdown: need N >= 1 and 2..1024 CPUs\n");
		return 2;
	}
	pin(0);
	for (int c = 1; c < ncpus; c++)
		pthread_create(&t[c], NULL, spinner, (void *)(intptr_t)c);
	usleep(100000); /* the spinners are on their CPUs */
	for (long i = 0; i < n; i++) {
		volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("tlb-shootdown: mmap");
			return 1;
		}
		p[0] = 1;
		unsigned aux;
		uint64_t t0 = __rdtscp(&aux);
		munmap((void *)p, 4096);
		uint64_t t1 = __rdtscp(&aux);
		uint64_t d = t1 - t0;
		if (out)
			fwrite(&d, sizeof(d), 1, out);
	}
	stop = 1;
	for (int c = 1; c < ncpus; c++)
		pthread_join(t[c], NULL);
	if (out)
		fclose(out);
	FILE *r = rpath ? fopen(rpath, "a") : NULL;
	if (r) {
		fprintf(r, "operations %ld\n", n);
		fclose(r);
	}
	return 0;
}
