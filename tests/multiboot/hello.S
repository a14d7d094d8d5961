/*
 * ipivmm's own multiboot test kernel (tests/tests/multiboot_boot.rs holds
 * these bytes, hand-checked against `as --32 hello.S && objdump -d a.out`):
 * entered as a multiboot v1 kernel (32-bit protected mode, paging off,
 * EAX = 0x2BADB002, EBX = the information structure), it prints its
 * command line (the info's cmdline field) and the CPU count fw_cfg gives
 * (item 0x05 through ports 0x510/0x511, as kvm-unit-tests reads it) on
 * COM1, then ends the run through the isa-debug-exit port 0xf4 with 0.
 * With a wrong EAX it prints '!' and exits with 1. No stack is used (ESP
 * is undefined at a multiboot entry). The image is position-dependent on
 * nothing: every address is read from EBX or is an I/O port.
 */
	.code32
	.text
	.globl start
start:
	jmp 1f
	.align 4
	/* The multiboot header: magic, flags (0, or 0x10000 with the address
	 * fields a flat image appends), checksum. */
	.long 0x1BADB002, 0, -0x1BADB002
1:
	cmp $0x2BADB002, %eax
	jne fail
	mov 16(%ebx), %esi	/* cmdline */
	mov $0x3f8, %dx
print:
	lodsb
	test %al, %al
	jz printed
	out %al, %dx
	jmp print
printed:
	mov $'\n', %al
	out %al, %dx
	mov $0x510, %dx		/* fw_cfg selector */
	mov $0x05, %ax		/* FW_CFG_NB_CPUS */
	out %ax, %dx
	inc %dx			/* fw_cfg data */
	in %dx, %al
	add $'0', %al
	mov $0x3f8, %dx
	out %al, %dx
	mov $'\n', %al
	out %al, %dx
	xor %eax, %eax
exit:
	mov $0xf4, %dx		/* isa-debug-exit */
	out %eax, %dx
hang:
	hlt
	jmp hang
fail:
	mov $0x3f8, %dx
	mov $'!', %al
	out %al, %dx
	mov $1, %eax
	jmp exit
