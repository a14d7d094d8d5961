/*
 * ipivmm-guest: the phase tool of a Linux guest under ipivmm
 * (docs/linux-guest.md). It speaks the payload ABI of docs/guest-abi.md
 * from guest userspace: a ControlMsg in a locked page whose guest-physical
 * address /proc/self/pagemap gives, a 32-bit `out` to the control port
 * (ioperm, as root), sent from each CPU in turn (pinned there), so every
 * vCPU's window opens and closes on its own thread as a payload's does.
 *
 * Every message carries the CPU's own counts as GuestCounters, read from
 * /proc/interrupts just before it: ipis_received = CAL + RES (the
 * function-call and reschedule IPIs its kernel handled), handler_entries =
 * every interrupt counted on it, spurious = SPU; and, when the IPI module
 * is loaded, icr_writes and ipis_sent = the module's calls from this CPU
 * and the IPIs they asked for (/proc/ipivmm_ipi). After a phase each CPU
 * records its CAL, RES, TLB and LOC deltas; the workload's own records
 * ("NAME VALUE" lines) and samples (little-endian u64) follow on CPU 0.
 *
 *   ipivmm-guest hello
 *   ipivmm-guest phase ID NAME -- CMD [ARGS...]   CMD between the markers
 *   ipivmm-guest ipi broadcast|multicast|unicast N [MASK|CPU]
 *   ipivmm-guest spin CPU                          busy until killed
 *   ipivmm-guest panic TEXT
 *   ipivmm-guest poweroff
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mman.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ControlMsg, GuestCounters, the kinds, the magic: generated from abi/. */
#include "ipivmm-abi.h"

#define PAGE 4096
#define MAX_CPUS 1024
#define SAMPLES_PER_MSG (PAGE / 8)
#define RECORDS_ENV "IPIVMM_RECORDS"
#define SAMPLES_ENV "IPIVMM_SAMPLES"

/* One CPU's rows of /proc/interrupts that ipivmm reads. */
struct irqs {
	uint64_t cal, res, tlb, loc, spu, total;
};

static struct ipivmm_control_msg *msg;      /* the message page: msg, then its text */
static char *text;           /* at msg + 128 */
static uint64_t msg_gpa;
static uint64_t *samples;    /* a page of samples */
static uint64_t samples_gpa;
static int ncpus;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "ipivmm-guest: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* The guest-physical address of the page at `p` (mlocked, touched). */
static uint64_t gpa_of(void *p)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);
	uint64_t e;
	if (fd < 0)
		die("/proc/self/pagemap: %s", strerror(errno));
	if (pread(fd, &e, 8, ((uintptr_t)p / PAGE) * 8) != 8)
		die("pagemap read: %s", strerror(errno));
	close(fd);
	if (!(e & (1ull << 63)) || (e & ((1ull << 55) - 1)) == 0)
		die("page not present or PFN hidden (run as root)");
	return (e & ((1ull << 55) - 1)) * PAGE + ((uintptr_t)p % PAGE);
}

static void *locked_page(uint64_t *gpa)
{
	void *p;
	if (posix_memalign(&p, PAGE, PAGE))
		die("out of memory");
	memset(p, 0, PAGE);
	if (mlock(p, PAGE))
		die("mlock: %s", strerror(errno));
	*gpa = gpa_of(p);
	return p;
}

static void setup(void)
{
	if (ioperm(IPIVMM_CONTROL_PORT, 4, 1))
		die("ioperm(0x%x): %s (run as root)", IPIVMM_CONTROL_PORT, strerror(errno));
	msg = locked_page(&msg_gpa);
	text = (char *)msg + sizeof(struct ipivmm_control_msg);
	samples = locked_page(&samples_gpa);
	ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpus < 1 || ncpus > MAX_CPUS)
		die("%d CPUs online", ncpus);
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("pinning to CPU %d: %s", cpu, strerror(errno));
	while (sched_getcpu() != cpu)
		sched_yield();
}

/* The rows of /proc/interrupts for every CPU (`out[ncpus]`). */
static void read_irqs(struct irqs *out)
{
	static char buf[1 << 20];
	int fd = open("/proc/interrupts", O_RDONLY);
	ssize_t n, len = 0;
	if (fd < 0)
		die("/proc/interrupts: %s", strerror(errno));
	while ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += n;
	close(fd);
	buf[len] = 0;
	memset(out, 0, sizeof(*out) * ncpus);
	char *line = strchr(buf, '\n'); /* skip the CPU header */
	while (line && *++line) {
		char *end = strchr(line, '\n');
		if (end)
			*end = 0;
		char *colon = strchr(line, ':');
		if (colon) {
			char name[16] = {0};
			sscanf(line, " %15[^:]", name);
			char *p = colon + 1;
			for (int c = 0; c < ncpus; c++) {
				char *q;
				uint64_t v = strtoull(p, &q, 10);
				if (q == p)
					break; /* ERR/MIS have one column */
				p = q;
				out[c].total += v;
				if (!strcmp(name, "CAL"))
					out[c].cal = v;
				else if (!strcmp(name, "RES"))
					out[c].res = v;
				else if (!strcmp(name, "TLB"))
					out[c].tlb = v;
				else if (!strcmp(name, "LOC"))
					out[c].loc = v;
				else if (!strcmp(name, "SPU"))
					out[c].spu = v;
			}
		}
		line = end;
	}
}

/* The IPI module's counts per CPU (0 without the module). */
static void read_module(uint64_t *calls, uint64_t *ipis)
{
	FILE *f = fopen("/proc/ipivmm_ipi", "r");
	memset(calls, 0, sizeof(*calls) * ncpus);
	memset(ipis, 0, sizeof(*ipis) * ncpus);
	if (!f)
		return;
	int cpu;
	uint64_t c, i;
	while (fscanf(f, " cpu %d calls %" SCNu64 " ipis %" SCNu64, &cpu, &c, &i) == 3)
		if (cpu >= 0 && cpu < ncpus) {
			calls[cpu] = c;
			ipis[cpu] = i;
		}
	fclose(f);
}

/* This CPU's counters now. */
static void counters_now(int cpu, struct ipivmm_guest_counters *out)
{
	static struct irqs irqs[MAX_CPUS];
	static uint64_t calls[MAX_CPUS], ipis[MAX_CPUS];
	read_irqs(irqs);
	read_module(calls, ipis);
	memset(out, 0, sizeof(*out));
	out->ipis_received = irqs[cpu].cal + irqs[cpu].res;
	out->handler_entries = irqs[cpu].total;
	out->spurious = irqs[cpu].spu;
	out->icr_writes = calls[cpu];
	out->ipis_sent = ipis[cpu];
}

/* Send the message from CPU `cpu` (the caller is pinned there). */
static void send(int cpu, uint16_t kind, uint32_t phase, uint64_t a0, uint64_t a1, uint64_t a2)
{
	msg->magic = IPIVMM_CONTROL_MAGIC;
	msg->version = IPIVMM_ABI_VERSION;
	msg->kind = kind;
	msg->vcpu = (uint32_t)cpu;
	msg->phase = phase;
	msg->arg[0] = a0;
	msg->arg[1] = a1;
	msg->arg[2] = a2;
	msg->arg[3] = 0;
	msg->reply = 0;
	msg->reserved = 0;
	counters_now(cpu, &msg->counters);
	__asm__ volatile("outl %0, %w1" : : "a"((uint32_t)msg_gpa), "Nd"(IPIVMM_CONTROL_PORT) : "memory");
	if (*(volatile uint64_t *)&msg->reply != 0)
		die("the host rejected message kind %u from CPU %d (its log says why)", kind, cpu);
}

/* `s` into the text area; its GPA and length. */
static uint64_t put_text(const char *s, size_t max, uint64_t *len)
{
	size_t n = strnlen(s, max);
	memcpy(text, s, n);
	*len = n;
	return msg_gpa + sizeof(struct ipivmm_control_msg);
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void record(int cpu, uint32_t phase, const char *name, uint64_t value)
{
	uint64_t len, at = put_text(name, IPIVMM_MAX_NAME_LEN, &len);
	send(cpu, IPIVMM_MSG_RECORD, phase, at, len, value);
}

static int cmd_hello(void)
{
	for (int c = 0; c < ncpus; c++) {
		pin(c);
		send(c, IPIVMM_MSG_HELLO, 0, 0, 0, 0);
	}
	return 0;
}

/* The workload's records file: "NAME VALUE" per line, sent on CPU 0. */
static void send_records(uint32_t phase, const char *path)
{
	FILE *f = fopen(path, "r");
	char name[IPIVMM_MAX_NAME_LEN + 1];
	uint64_t v;
	if (!f)
		return;
	while (fscanf(f, " %64s %" SCNu64, name, &v) == 2)
		record(0, phase, name, v);
	fclose(f);
}

/* The workload's samples (u64 TSC cycles), a page per message, on CPU 0. */
static void send_samples(uint32_t phase, const char *path)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;
	if (fd < 0)
		return;
	while ((n = read(fd, samples, PAGE)) >= 8)
		send(0, IPIVMM_MSG_SAMPLES, phase, samples_gpa, (uint64_t)n / 8, 0);
	close(fd);
}

static int cmd_phase(uint32_t id, const char *name, char **cmd)
{
	static struct irqs before[MAX_CPUS], after[MAX_CPUS];
	char records[64], samples_path[64];
	uint64_t len, at;
	snprintf(records, sizeof(records), "/tmp/ipivmm-records.%u", id);
	snprintf(samples_path, sizeof(samples_path), "/tmp/ipivmm-samples.%u", id);
	unlink(records);
	unlink(samples_path);
	read_irqs(before);
	uint64_t t0 = now_ns();
	for (int c = 0; c < ncpus; c++) {
		pin(c);
		at = put_text(name, IPIVMM_MAX_NAME_LEN, &len);
		send(c, IPIVMM_MSG_PHASE_BEGIN, id, at, len, 0);
	}
	pid_t pid = fork();
	if (pid == 0) {
		cpu_set_t all;
		CPU_ZERO(&all);
		for (int c = 0; c < ncpus; c++)
			CPU_SET(c, &all);
		sched_setaffinity(0, sizeof(all), &all);
		setenv(RECORDS_ENV, records, 1);
		setenv(SAMPLES_ENV, samples_path, 1);
		execvp(cmd[0], cmd);
		fprintf(stderr, "ipivmm-guest: %s: %s\n", cmd[0], strerror(errno));
		_exit(127);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		die("running %s: %s", cmd[0], strerror(errno));
	for (int c = 0; c < ncpus; c++) {
		pin(c);
		send(c, IPIVMM_MSG_PHASE_END, id, 0, 0, 0);
	}
	uint64_t ns = now_ns() - t0;
	read_irqs(after);
	/* Records after the markers: their exits are outside the window. */
	for (int c = 0; c < ncpus; c++) {
		pin(c);
		record(c, id, "linux_cal", after[c].cal - before[c].cal);
		record(c, id, "linux_res", after[c].res - before[c].res);
		record(c, id, "linux_tlb", after[c].tlb - before[c].tlb);
		record(c, id, "linux_loc", after[c].loc - before[c].loc);
	}
	pin(0);
	record(0, id, "guest_ns", ns);
	record(0, id, "exit_status", WIFEXITED(status) ? (uint64_t)WEXITSTATUS(status) : 128u + (uint64_t)WTERMSIG(status));
	send_records(id, records);
	send_samples(id, samples_path);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Append "NAME VALUE" to the phase's records file. */
static void add_record(const char *name, uint64_t v)
{
	const char *path = getenv(RECORDS_ENV);
	FILE *f = path ? fopen(path, "a") : NULL;
	if (!f)
		return;
	fprintf(f, "%s %" PRIu64 "\n", name, v);
	fclose(f);
}

/* Drive the IPI module from CPU 0: N operations, their cycles as samples. */
static int cmd_ipi(const char *mode, uint64_t n, const char *arg)
{
	char line[128];
	pin(0);
	int fd = open("/proc/ipivmm_ipi", O_WRONLY);
	if (fd < 0)
		die("/proc/ipivmm_ipi: %s (is ipivmm_ipi.ko loaded?)", strerror(errno));
	int k = snprintf(line, sizeof(line), "%s %" PRIu64 " %s\n", mode, n, arg ? arg : "0");
	if (write(fd, line, (size_t)k) != k)
		die("the IPI module refused '%s': %s", mode, strerror(errno));
	close(fd);
	add_record("operations", n);
	const char *path = getenv(SAMPLES_ENV);
	if (!path)
		return 0;
	int in = open("/proc/ipivmm_ipi_samples", O_RDONLY);
	int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	char buf[PAGE];
	ssize_t r;
	if (in < 0 || out < 0)
		die("samples: %s", strerror(errno));
	while ((r = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)r) != r)
			die("samples: %s", strerror(errno));
	close(in);
	close(out);
	return 0;
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static int cmd_spin(int cpu)
{
	signal(SIGTERM, on_term);
	pin(cpu);
	while (!stop)
		__asm__ volatile("" ::: "memory");
	return 0;
}

static int cmd_panic(const char *why)
{
	uint64_t len, at;
	pin(0);
	at = put_text(why, IPIVMM_MAX_TEXT_LEN, &len);
	send(0, IPIVMM_MSG_PANIC, 0, at, len, 0);
	return 1; /* not reached: the host does not resume a panicked vCPU */
}

static int cmd_poweroff(void)
{
	sync();
	reboot(RB_POWER_OFF);
	die("poweroff: %s", strerror(errno));
	return 1;
}

static void usage(void)
{
	die("usage: ipivmm-guest hello | phase ID NAME -- CMD... | ipi MODE N [ARG] | spin CPU | panic TEXT | poweroff");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	const char *c = argv[1];
	if (!strcmp(c, "spin") && argc == 3) {
		ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
		return cmd_spin(atoi(argv[2]));
	}
	if (!strcmp(c, "poweroff"))
		return cmd_poweroff();
	if (!strcmp(c, "ipi") && (argc == 4 || argc == 5)) {
		ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
		return cmd_ipi(argv[2], strtoull(argv[3], NULL, 0), argc == 5 ? argv[4] : NULL);
	}
	setup();
	if (!strcmp(c, "hello"))
		return cmd_hello();
	if (!strcmp(c, "panic") && argc == 3)
		return cmd_panic(argv[2]);
	if (!strcmp(c, "phase") && argc >= 6 && !strcmp(argv[4], "--"))
		return cmd_phase((uint32_t)strtoul(argv[2], NULL, 0), argv[3], argv + 5);
	usage();
	return 2;
}
