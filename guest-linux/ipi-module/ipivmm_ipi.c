// SPDX-License-Identifier: GPL-2.0
/*
 * ipivmm_ipi: the IPI benchmark of ipivmm's Linux guest
 * (docs/linux-guest.md), after the IPI microbenchmark of the AVIC report
 * (seed 000: "Destination Shorthand is All excluding self").
 *
 * Write "MODE N ARG" to /proc/ipivmm_ipi and the writer's CPU runs N
 * operations, each a cross-CPU function call that waits for its targets:
 *   broadcast  smp_call_function_many() to every other online CPU
 *              (one all-but-self ICR write when every CPU is online and
 *              none has a call queued: native_send_call_func_ipi)
 *   multicast  smp_call_function_many() to the CPUs of bitmask ARG
 *   unicast    smp_call_function_single() to CPU ARG
 * The TSC cycles of each operation are in /proc/ipivmm_ipi_samples (u64,
 * the last run's); /proc/ipivmm_ipi reads "cpu C calls N ipis M" per CPU:
 * the operations each CPU sent and the IPIs they asked for, since load.
 */
#include <linux/cpumask.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/proc_fs.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <asm/msr.h>

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ipivmm: cross-CPU function calls, timed");

#define MAX_OPS (1UL << 22)

static DEFINE_MUTEX(lock);
static DEFINE_PER_CPU(u64, calls);
static DEFINE_PER_CPU(u64, ipis);
static u64 *samples;
static unsigned long nsamples;

static void noop(void *info)
{
}

static int run(const char *mode, unsigned long n, unsigned long arg)
{
	struct cpumask *mask;
	unsigned long i;
	int ret = 0;

	if (n == 0 || n > MAX_OPS)
		return -EINVAL;
	if (!zalloc_cpumask_var(&mask, GFP_KERNEL))
		return -ENOMEM;
	vfree(samples);
	nsamples = 0;
	samples = vmalloc(array_size(n, sizeof(u64)));
	if (!samples) {
		free_cpumask_var(mask);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		u64 t0, t1;
		unsigned int me, targets;

		preempt_disable();
		me = smp_processor_id();
		if (!strcmp(mode, "unicast")) {
			if (arg >= nr_cpu_ids || !cpu_online(arg) || arg == me) {
				preempt_enable();
				ret = -EINVAL;
				break;
			}
			targets = 1;
			t0 = rdtsc_ordered();
			smp_call_function_single(arg, noop, NULL, 1);
			t1 = rdtsc_ordered();
		} else {
			if (!strcmp(mode, "broadcast")) {
				cpumask_copy(mask, cpu_online_mask);
			} else if (!strcmp(mode, "multicast")) {
				unsigned int b;

				cpumask_clear(mask);
				for (b = 0; b < BITS_PER_LONG && b < nr_cpu_ids; b++)
					if ((arg >> b) & 1)
						cpumask_set_cpu(b, mask);
				cpumask_and(mask, mask, cpu_online_mask);
			} else {
				preempt_enable();
				ret = -EINVAL;
				break;
			}
			cpumask_clear_cpu(me, mask);
			targets = cpumask_weight(mask);
			if (!targets) {
				preempt_enable();
				ret = -EINVAL;
				break;
			}
			t0 = rdtsc_ordered();
			smp_call_function_many(mask, noop, NULL, true);
			t1 = rdtsc_ordered();
		}
		this_cpu_inc(calls);
		this_cpu_add(ipis, targets);
		preempt_enable();
		samples[nsamples++] = t1 - t0;
		cond_resched();
	}
	free_cpumask_var(mask);
	return ret;
}

static ssize_t ctl_write(struct file *f, const char __user *ubuf, size_t len, loff_t *off)
{
	char buf[64], mode[16];
	unsigned long n, arg;
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sscanf(buf, "%15s %lu %li", mode, &n, &arg) != 3)
		return -EINVAL;
	mutex_lock(&lock);
	ret = run(mode, n, arg);
	mutex_unlock(&lock);
	return ret ? ret : len;
}

static int ctl_show(struct seq_file *s, void *v)
{
	int cpu;

	for_each_online_cpu(cpu)
		seq_printf(s, "cpu %d calls %llu ipis %llu\n", cpu, per_cpu(calls, cpu),
			   per_cpu(ipis, cpu));
	return 0;
}

static int ctl_open(struct inode *inode, struct file *f)
{
	return single_open(f, ctl_show, NULL);
}

static const struct proc_ops ctl_ops = {
	.proc_open = ctl_open,
	.proc_read = seq_read,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
	.proc_write = ctl_write,
};

static ssize_t samples_read(struct file *f, char __user *ubuf, size_t len, loff_t *off)
{
	ssize_t ret;

	mutex_lock(&lock);
	ret = simple_read_from_buffer(ubuf, len, off, samples, nsamples * sizeof(u64));
	mutex_unlock(&lock);
	return ret;
}

static const struct proc_ops samples_ops = {
	.proc_read = samples_read,
};

static int __init ipivmm_ipi_init(void)
{
	if (!proc_create("ipivmm_ipi", 0600, NULL, &ctl_ops))
		return -ENOMEM;
	if (!proc_create("ipivmm_ipi_samples", 0400, NULL, &samples_ops)) {
		remove_proc_entry("ipivmm_ipi", NULL);
		return -ENOMEM;
	}
	return 0;
}

static void __exit ipivmm_ipi_exit(void)
{
	remove_proc_entry("ipivmm_ipi_samples", NULL);
	remove_proc_entry("ipivmm_ipi", NULL);
	vfree(samples);
}

module_init(ipivmm_ipi_init);
module_exit(ipivmm_ipi_exit);
