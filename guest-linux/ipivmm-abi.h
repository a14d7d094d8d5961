/* ipivmm-abi.h: the control-message ABI of ipivmm (docs/guest-abi.md) for C.
 * Generated from abi/src (ipivmm_abi::c_header) by `cargo xtask abi-header`:
 * do not edit. abi/tests/c_header.rs checks that this is the generated
 * file and that a C compiler lays it out as Rust does. */
#ifndef IPIVMM_ABI_H
#define IPIVMM_ABI_H

#include <stddef.h>
#include <stdint.h>

#define IPIVMM_ABI_VERSION 0x1
#define IPIVMM_CONTROL_PORT 0xce0
#define IPIVMM_CONTROL_MSG_SIZE 0x80
#define IPIVMM_CONTROL_MAGIC 0x4d495049u
#define IPIVMM_MAX_NAME_LEN UINT64_C(0x40)
#define IPIVMM_MAX_TEXT_LEN UINT64_C(0x400)
#define IPIVMM_MAX_SAMPLES_PER_MSG UINT64_C(0x100000)
#define IPIVMM_UNIT_TSC_CYCLES UINT64_C(0x0)
#define IPIVMM_REPLY_OK UINT64_C(0x0)
#define IPIVMM_REPLY_REJECTED UINT64_C(0x1)
#define IPIVMM_PHASE_UNCOUNTED UINT64_C(0x1)

enum ipivmm_msg_kind {
	IPIVMM_MSG_HELLO = 1,
	IPIVMM_MSG_PHASE_BEGIN = 2,
	IPIVMM_MSG_PHASE_END = 3,
	IPIVMM_MSG_SAMPLES = 4,
	IPIVMM_MSG_RECORD = 5,
	IPIVMM_MSG_DONE = 6,
	IPIVMM_MSG_PANIC = 7,
};

struct ipivmm_guest_counters {
	uint64_t icr_writes;
	uint64_t ipis_sent;
	uint64_t ipis_received;
	uint64_t handler_entries;
	uint64_t eois;
	uint64_t hypercalls;
	uint64_t spurious;
	uint64_t barrier_icr_writes;
};
_Static_assert(offsetof(struct ipivmm_guest_counters, icr_writes) == 0, "ipivmm_guest_counters.icr_writes at 0");
_Static_assert(offsetof(struct ipivmm_guest_counters, ipis_sent) == 8, "ipivmm_guest_counters.ipis_sent at 8");
_Static_assert(offsetof(struct ipivmm_guest_counters, ipis_received) == 16, "ipivmm_guest_counters.ipis_received at 16");
_Static_assert(offsetof(struct ipivmm_guest_counters, handler_entries) == 24, "ipivmm_guest_counters.handler_entries at 24");
_Static_assert(offsetof(struct ipivmm_guest_counters, eois) == 32, "ipivmm_guest_counters.eois at 32");
_Static_assert(offsetof(struct ipivmm_guest_counters, hypercalls) == 40, "ipivmm_guest_counters.hypercalls at 40");
_Static_assert(offsetof(struct ipivmm_guest_counters, spurious) == 48, "ipivmm_guest_counters.spurious at 48");
_Static_assert(offsetof(struct ipivmm_guest_counters, barrier_icr_writes) == 56, "ipivmm_guest_counters.barrier_icr_writes at 56");
_Static_assert(sizeof(struct ipivmm_guest_counters) == 64, "ipivmm_guest_counters is 64 bytes");

struct ipivmm_control_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t kind;
	uint32_t vcpu;
	uint32_t phase;
	uint64_t arg[4];
	struct ipivmm_guest_counters counters;
	uint64_t reply;
	uint64_t reserved;
};
_Static_assert(offsetof(struct ipivmm_control_msg, magic) == 0, "ipivmm_control_msg.magic at 0");
_Static_assert(offsetof(struct ipivmm_control_msg, version) == 4, "ipivmm_control_msg.version at 4");
_Static_assert(offsetof(struct ipivmm_control_msg, kind) == 6, "ipivmm_control_msg.kind at 6");
_Static_assert(offsetof(struct ipivmm_control_msg, vcpu) == 8, "ipivmm_control_msg.vcpu at 8");
_Static_assert(offsetof(struct ipivmm_control_msg, phase) == 12, "ipivmm_control_msg.phase at 12");
_Static_assert(offsetof(struct ipivmm_control_msg, arg) == 16, "ipivmm_control_msg.arg at 16");
_Static_assert(offsetof(struct ipivmm_control_msg, counters) == 48, "ipivmm_control_msg.counters at 48");
_Static_assert(offsetof(struct ipivmm_control_msg, reply) == 112, "ipivmm_control_msg.reply at 112");
_Static_assert(offsetof(struct ipivmm_control_msg, reserved) == 120, "ipivmm_control_msg.reserved at 120");
_Static_assert(sizeof(struct ipivmm_control_msg) == 128, "ipivmm_control_msg is 128 bytes");

#endif
