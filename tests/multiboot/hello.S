/*
 * ipivmm's own multiboot test kernel (tests/tests/multiboot_boot.rs holds
 * these bytes: `as --32 hello.S && objcopy -O binary a.out hello.bin`,
 * checked against `objdump -d a.out`): entered as a multiboot v1 kernel
 * (32-bit protected mode, paging off, EAX = 0x2BADB002, EBX = the
 * information structure), it prints its command line (the info's cmdline
 * field) and the CPU count fw_cfg gives (item 0x05 through ports
 * 0x510/0x511, as kvm-unit-tests reads it) on COM1: its boot. Then three
 * "tests", each ending with a line as kvm-unit-tests' vmexit prints one
 * (`NAME N`, docs/kvm-unit-tests.md): `outs 100` after 100 writes to the
 * fw_cfg selector, `ins 60` after 60 reads of its data port, then a
 * figure line of that test (`  ipi ins 7`), and `outs 30` after 30 more
 * writes (a repeated name). It ends the run through the isa-debug-exit
 * port 0xf4 with 0. With a wrong EAX it prints '!' and exits with 1. No
 * stack is used (ESP is undefined at a multiboot entry). The image is
 * position-dependent on nothing: every address is read from EBX or is an
 * I/O port.
 */
	/* One byte to COM1 (DX = 0x3f8). */
	.macro putc c
	mov $\c, %al
	out %al, %dx
	.endm
	/* A word (no spaces) to COM1. */
	.macro say word
	.irpc c, \word
	putc "'\c'"
	.endr
	.endm
	/* DX = port, then `count` times `insn`, then DX = COM1. */
	.macro repeat count, port, insn:vararg
	mov $\count, %ecx
	mov $\port, %dx
0:	\insn
	loop 0b
	mov $0x3f8, %dx
	.endm

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
	/* The tests: 9, 7, 12 and 8 bytes of their lines. */
	repeat 100, 0x510, out %ax, %dx
	say outs
	putc ' '
	say 100
	putc '\n'
	repeat 60, 0x511, in %dx, %al
	say ins
	putc ' '
	say 60
	putc '\n'
	putc ' '
	putc ' '
	say ipi
	putc ' '
	say ins
	putc ' '
	say 7
	putc '\n'
	repeat 30, 0x510, out %ax, %dx
	say outs
	putc ' '
	say 30
	putc '\n'
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
