//! Shared helpers of the integration tests (tests/tests/*.rs): KVM presence
//! checks that say when they skip, and tiny hand-assembled guest payloads.
use ipivmm::config::{PayloadSource, VmConfig};
use ipivmm::payload_image::minimal_elf;
use ipivmm::run::{run, RunOptions, RunReport};
use ipivmm_abi::PAYLOAD_START;

/// True when /dev/kvm can be opened; otherwise prints why the test skips.
pub fn kvm_available(test: &str) -> bool {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP {test}: /dev/kvm cannot be opened ({e}); this test needs KVM");
            false
        }
    }
}

/// Run `config`, panicking (test failure) only if the run could not start.
pub fn run_ok(config: &VmConfig) -> RunReport {
    match run(config, RunOptions::default()) {
        Ok(r) => r,
        Err(e) => panic!("run could not start: {e}"),
    }
}

/// A payload of raw x86-64 machine code at the payload base.
pub fn code_payload(code: &[u8]) -> PayloadSource {
    PayloadSource::Bytes(minimal_elf(PAYLOAD_START, code))
}

/// Machine code snippets (assembled by hand; the comment is the source).
pub mod code {
    /// `ud2` with no IDT loaded: #UD -> #DF -> triple fault.
    pub const TRIPLE_FAULT: &[u8] = &[0x0f, 0x0b];
    /// `jmp .`: never finishes.
    pub const SPIN_FOREVER: &[u8] = &[0xeb, 0xfe];
    /// `mov eax, 0xdeadbeef; mov dx, 0xce0; out dx, eax; jmp .`:
    /// a control-port write whose GPA is outside guest RAM.
    pub const GARBAGE_CONTROL: &[u8] = &[
        0xb8, 0xef, 0xbe, 0xad, 0xde, 0x66, 0xba, 0xe0, 0x0c, 0xef, 0xeb, 0xfe,
    ];
    /// `test rsi, rsi; jz +2; ud2; jmp .`: vCPU 0 spins, the others triple-fault.
    pub const SPIN_ON_VCPU0_FAULT_ELSEWHERE: &[u8] =
        &[0x48, 0x85, 0xf6, 0x74, 0x02, 0x0f, 0x0b, 0xeb, 0xfe];
    /// `movsd xmm0, [rdi]; jmp .`: KVM's emulator cannot run SSE
    /// (KVM_EXIT_INTERNAL_ERROR, suberror 1, under kvm_pvm).
    pub const SSE: &[u8] = &[0xf2, 0x0f, 0x10, 0x07, 0xeb, 0xfe];
}
