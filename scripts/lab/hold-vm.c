/*
 * The lab's guest keeps one empty KVM VM for as long as this runs.
 *
 * Why: KVM enables the preempt_notifier_key static key when the first VM is
 * created and disables it when the last one is destroyed, and each switch
 * patches __schedule's jump-label sites (text_poke_bp) while the other CPU
 * schedules. Under QEMU's multi-threaded TCG that patching occasionally left
 * both emulated CPUs stuck at the patched site in __schedule with interrupts
 * off (scripts/lab.sh's wedge dumps), most often in tests that create and
 * destroy many VMs. With a VM held, the key never returns to zero during the
 * pass and nothing is patched. The VM has no vCPU and never runs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define KVM_CREATE_VM 0xAE01

int main(void)
{
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		perror("hold-vm: /dev/kvm");
		return 1;
	}
	if (ioctl(kvm, KVM_CREATE_VM, 0UL) < 0) {
		perror("hold-vm: KVM_CREATE_VM");
		return 1;
	}
	for (;;)
		pause();
}
