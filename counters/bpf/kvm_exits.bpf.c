// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// VM exits by reason, with host time, counted in the kernel per vCPU thread
// (ipivmm-counters, src/bpf/). Built by counters/build.rs with
// `clang -target bpf -O2 -g`; loaded by aya. No libbpf headers, no CO-RE:
// the record offsets of kvm:kvm_exit come from its tracefs `format` at run
// time, through the CONFIG map.
//
// - on_exit_raw, on the raw tracepoint `kvm_exit` (the default where the
//   kernel's BTF says where the vendor module keeps the reason, passed in
//   CONFIG): counts the exit in its reason's slot and remembers when it
//   happened, reading the reason through the vCPU pointer (no record).
// - on_exit, on `kvm:kvm_exit` (a tracepoint program: it reads the record;
//   the fallback without that BTF): the same.
// - on_entry, on the raw tracepoint `kvm_entry` (no record needed): adds the
//   time since that exit to the slot's host time.
//
// - on_kvm_apic, on_kvm_msr, ... (raw tracepoints: their arguments, in the
//   order of each event's TP_PROTO, which the loader checks against the
//   event's format): the per-vCPU event counters (ICR writes, PV IPIs,
//   wake-ups...), so nothing else per vCPU needs a perf event.
// - on_inhibit_changed (raw tracepoint kvm_apicv_inhibit_changed): every
//   APICv inhibit change of this process's threads, appended to INHIBITS.
//
// Only threads listed in THREADS (tid -> vCPU index) are counted, each in its
// own VCPUS element, and only while that element's `counting` switch is set
// (the vCPU thread flips it itself, through the mmap of VCPUS, at its phase
// markers). While no thread's switch is on (ACTIVE), on_exit is detached by
// the loader and the raw tracepoint programs (on_exit_raw too) return at
// once. The layout below is mirrored by src/bpf/layout.rs; the loader
// checks the sizes.

typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_F_MMAPABLE (1U << 10)

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *src) = (void *)113;

// Reason slots: 0x00-0xbf as they are (VMX: the basic reason, low 16 bits),
// SVM 0x400-0x40f at 0xc0, SVM 0x80000000-0x8000001f (VMGEXIT) at 0xd0,
// SVM_EXIT_ERR (-1) at 0xf0, SVM_VMGEXIT_HV_FEATURES (0x8000fffd) at 0xf1,
// anything else at SLOT_OTHER.
#define SLOTS 244
#define SLOT_OTHER 243
#define ISA_SVM 2

// Event counters (src/bpf/layout.rs: EVENT_NAMES).
#define EVENTS 8
#define EV_APIC_ICR_WRITE 0   // kvm_apic: rw == 1 && reg == 0x300
#define EV_MSR_ICR_WRITE 1    // kvm_msr: write == 1 && ecx == 0x830
#define EV_HYPERCALL_SEND_IPI 2 // kvm_hypercall: nr == 10
#define EV_AVIC_INCOMPLETE 3  // kvm_avic_incomplete_ipi
#define EV_AVIC_INCOMPLETE_BUSY 4 // ... && (id == 0 || id == 2) && icrl & 0x1000
#define EV_WAKEUP_WAITED 5    // kvm_vcpu_wakeup: waited
#define EV_WAKEUP_POLLED 6    // kvm_vcpu_wakeup: !waited
#define EV_APIC_IPI 7         // kvm_apic_ipi

struct raw_args {
	u64 args[5];
};

struct config {
	u32 reason_offset; // of kvm_exit's exit_reason (u32) in the record
	u32 isa_offset;    // of its isa (u32); 0: absent
	u32 default_isa;   // the host's, when the record has none
	u32 tgid;          // the process whose inhibit changes are logged
	// on_exit_raw: where KVM keeps the exit reason, from the vCPU pointer
	// (TP_PROTO(struct kvm_vcpu *vcpu, u32 isa)); offsets from module BTF.
	u32 raw_hops;      // 1: a u32 at vcpu + raw_at; 2: at *(vcpu + raw_at) + raw_then
	u32 raw_at;
	u32 raw_then;
	u32 pad;
};

struct vcpu {
	u32 counting;     // the switch (userspace)
	u32 pending;      // slot + 1 of the exit in progress, 0: none
	u64 exit_ns;      // when it happened (CLOCK_MONOTONIC)
	u64 exits;        // exits counted
	u64 unmatched;    // exits that got no entry before the next exit
	u64 unreadable;   // records whose reason could not be read
	u64 other_code;   // the last code counted in SLOT_OTHER
	u64 isa;          // the last isa seen
	u64 reserved;
	u64 events[EVENTS]; // the event counters, by EV_*
	u64 count[SLOTS];
	u64 timed[SLOTS];
	u64 host_ns[SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct config);
} CONFIG SEC(".maps");

#define INHIBIT_LOG 255

struct inhibit_change {
	u64 time_ns;  // CLOCK_MONOTONIC
	u64 inhibits; // every reason in effect after the change
	u32 reason;
	u32 set;
	u32 tid;
	u32 pad;
};

struct inhibit_log {
	u64 next; // changes seen; those past INHIBIT_LOG are lost
	u64 pad;
	struct inhibit_change e[INHIBIT_LOG];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, u32);
	__type(value, struct inhibit_log);
} INHIBITS SEC(".maps");

// How many registered threads have their switch on (userspace keeps it,
// through an mmap). While it is 0 (an uncounted part on every vCPU) each
// program returns after this one inlined array load, before the thread
// lookup: what an uncounted part pays per event.
struct active {
	u32 threads;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, u32);
	__type(value, struct active);
} ACTIVE SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} THREADS SEC(".maps");

// A direct-mapped cache of THREADS, by the low bits of the tid (filled by
// userspace through an mmap when the slot is free): one inlined array load
// instead of a hash lookup at every event; a thread whose slot another took
// is found in THREADS.
#define TID_SLOTS 4096

struct tid_slot {
	u32 tid;   // 0: free
	u32 index; // its VCPUS element
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TID_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, u32);
	__type(value, struct tid_slot);
} TIDS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, u32);
	__type(value, struct vcpu);
} VCPUS SEC(".maps");

static __attribute__((always_inline)) u32 slot_of(u32 code, u32 isa)
{
	if (isa != ISA_SVM)
		code &= 0xffff;
	if (code < 0xc0)
		return code;
	if (isa != ISA_SVM)
		return SLOT_OTHER;
	if (code >= 0x400 && code < 0x410)
		return 0xc0 + (code - 0x400);
	if (code >= 0x80000000 && code < 0x80000020)
		return 0xd0 + (code - 0x80000000);
	if (code == 0xffffffff)
		return 0xf0;
	if (code == 0x8000fffd)
		return 0xf1;
	return SLOT_OTHER;
}

// The calling thread's element, when it is a vCPU thread that is counting.
static __attribute__((always_inline)) struct vcpu *counting_vcpu(void)
{
	u32 zero = 0;
	struct active *a = bpf_map_lookup_elem(&ACTIVE, &zero);
	if (!a || !a->threads)
		return 0;
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u32 slot = tid & (TID_SLOTS - 1);
	u32 index;
	struct tid_slot *t = bpf_map_lookup_elem(&TIDS, &slot);
	if (t && t->tid == tid) {
		index = t->index;
	} else {
		u32 *i = bpf_map_lookup_elem(&THREADS, &tid);
		if (!i)
			return 0;
		index = *i;
	}
	struct vcpu *v = bpf_map_lookup_elem(&VCPUS, &index);
	if (!v || !v->counting)
		return 0;
	return v;
}

// Counts an exit of reason `code` in its slot and remembers when it was.
static __attribute__((always_inline)) void count_exit(struct vcpu *v, u32 code, u32 isa, u64 now)
{
	u64 s = slot_of(code, isa);
	// Hidden from the compiler, so the bound the verifier needs stays.
	asm volatile("" : "+r"(s));
	if (s >= SLOTS)
		return;
	if (v->pending)
		v->unmatched++;
	if (s == SLOT_OTHER)
		v->other_code = code;
	v->isa = isa;
	v->exits++;
	v->count[s]++;
	v->pending = s + 1;
	v->exit_ns = now;
}

SEC("tracepoint/kvm/kvm_exit")
int on_exit(void *ctx)
{
	struct vcpu *v = counting_vcpu();
	if (!v)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&CONFIG, &zero);
	if (!c)
		return 0;
	u32 code = 0, isa = c->default_isa;
	if (bpf_probe_read_kernel(&code, sizeof(code), (char *)ctx + (c->reason_offset & 0xfff))) {
		v->unreadable++;
		return 0;
	}
	if (c->isa_offset)
		bpf_probe_read_kernel(&isa, sizeof(isa), (char *)ctx + (c->isa_offset & 0xfff));
	count_exit(v, code, isa, now);
	return 0;
}

// The same count from the raw tracepoint: no record is built (the record's
// get_exit_info call and perf buffer), and a raw tracepoint program detaches
// without an RCU grace period. The reason is read where get_exit_info reads
// it: vcpu_vmx's exit_reason (one hop), vcpu_svm's vmcb->control.exit_code
// (two).
SEC("raw_tracepoint/kvm_exit")
int on_exit_raw(struct raw_args *ctx)
{
	struct vcpu *v = counting_vcpu();
	if (!v)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&CONFIG, &zero);
	if (!c)
		return 0;
	char *p = (char *)ctx->args[0];
	u32 at = c->raw_at;
	if (c->raw_hops == 2) {
		if (bpf_probe_read_kernel(&p, sizeof(p), p + (at & 0xffff))) {
			v->unreadable++;
			return 0;
		}
		at = c->raw_then;
	}
	u32 code = 0;
	if (bpf_probe_read_kernel(&code, sizeof(code), p + (at & 0xffff))) {
		v->unreadable++;
		return 0;
	}
	count_exit(v, code, (u32)ctx->args[1], now);
	return 0;
}

SEC("raw_tracepoint/kvm_entry")
int on_entry(void *ctx)
{
	struct vcpu *v = counting_vcpu();
	if (!v)
		return 0;
	u32 p = v->pending;
	if (!p)
		return 0;
	u64 s = (u64)p - 1;
	asm volatile("" : "+r"(s));
	if (s >= SLOTS)
		return 0;
	u64 now = bpf_ktime_get_ns();
	v->timed[s]++;
	v->host_ns[s] += now - v->exit_ns;
	v->pending = 0;
	return 0;
}

#define COUNT(ev) \
	do { \
		struct vcpu *v = counting_vcpu(); \
		if (v) \
			v->events[ev]++; \
	} while (0)

// kvm_apic(unsigned int rw, unsigned int reg, u64 val)
SEC("raw_tracepoint/kvm_apic")
int on_kvm_apic(struct raw_args *ctx)
{
	if ((u32)ctx->args[0] == 1 && (u32)ctx->args[1] == 0x300)
		COUNT(EV_APIC_ICR_WRITE);
	return 0;
}

// kvm_msr(unsigned write, u32 ecx, u64 data, bool exception)
SEC("raw_tracepoint/kvm_msr")
int on_kvm_msr(struct raw_args *ctx)
{
	if ((u32)ctx->args[0] == 1 && (u32)ctx->args[1] == 0x830)
		COUNT(EV_MSR_ICR_WRITE);
	return 0;
}

// kvm_hypercall(unsigned long nr, unsigned long a0, ... a3)
SEC("raw_tracepoint/kvm_hypercall")
int on_kvm_hypercall(struct raw_args *ctx)
{
	if (ctx->args[0] == 10)
		COUNT(EV_HYPERCALL_SEND_IPI);
	return 0;
}

// kvm_avic_incomplete_ipi(u32 vcpu, u32 icrh, u32 icrl, u32 id, u32 index)
SEC("raw_tracepoint/kvm_avic_incomplete_ipi")
int on_kvm_avic_incomplete_ipi(struct raw_args *ctx)
{
	struct vcpu *v = counting_vcpu();
	if (!v)
		return 0;
	u32 icrl = ctx->args[2], id = ctx->args[3];
	v->events[EV_AVIC_INCOMPLETE]++;
	if ((id == 0 || id == 2) && (icrl & 0x1000))
		v->events[EV_AVIC_INCOMPLETE_BUSY]++;
	return 0;
}

// kvm_vcpu_wakeup(__u64 ns, bool waited, bool valid)
SEC("raw_tracepoint/kvm_vcpu_wakeup")
int on_kvm_vcpu_wakeup(struct raw_args *ctx)
{
	if ((ctx->args[1] & 0xff) != 0)
		COUNT(EV_WAKEUP_WAITED);
	else
		COUNT(EV_WAKEUP_POLLED);
	return 0;
}

// kvm_apic_ipi(__u32 icr_low, __u32 dest_id)
SEC("raw_tracepoint/kvm_apic_ipi")
int on_kvm_apic_ipi(struct raw_args *ctx)
{
	COUNT(EV_APIC_IPI);
	return 0;
}

// kvm_apicv_inhibit_changed(int reason, bool set, unsigned long inhibits)
SEC("raw_tracepoint/kvm_apicv_inhibit_changed")
int on_inhibit_changed(struct raw_args *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&CONFIG, &zero);
	if (!c || (u32)(pid_tgid >> 32) != c->tgid)
		return 0;
	struct inhibit_log *log = bpf_map_lookup_elem(&INHIBITS, &zero);
	if (!log)
		return 0;
	u64 i = __sync_fetch_and_add(&log->next, 1);
	asm volatile("" : "+r"(i));
	if (i >= INHIBIT_LOG)
		return 0;
	struct inhibit_change *e = &log->e[i];
	e->reason = (u32)ctx->args[0];
	e->set = ctx->args[1] & 0xff;
	e->inhibits = ctx->args[2];
	e->tid = (u32)pid_tgid;
	e->time_ns = bpf_ktime_get_ns();
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
