# The devices of the lab's QEMU (scripts/lab/build-qemu.sh configures with
# --without-default-devices and this list, as configs/devices/x86_64-softmmu/
# ipivmm-lab.mak): the machine xtask/src/lab/qemu.rs starts, `pc` (i440FX)
# with -nodefaults, a virtio-blk disk for the results and the serial console.
# Kconfig adds what these select (PIIX3, the PIT, PIC, IOAPIC, RTC, ISA
# serial, fw_cfg, ...). Listed as well: what the i440FX machine creates
# unless told not to, so the guest sees the machine the full build gives it:
# the HPET and the VMware port behind the i8042.
CONFIG_I440FX=y
CONFIG_HPET=y
CONFIG_VMPORT=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_BLK=y
