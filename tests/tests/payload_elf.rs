//! The built-in payload, and the hostile test payload built the same way,
//! are x86-64 ELFs that fit the guest layout and contain no SSE/AVX/MMX/x87
//! instruction (KVM's instruction emulator, which runs guest kernel code
//! under kvm_pvm, fails on them). No KVM needed.

use ipivmm::PayloadSource;
use ipivmm_abi::{PAYLOAD_END, PAYLOAD_START};
use ipivmm_tests::HOSTILE_PAYLOAD;
use std::process::Command;

const PT_LOAD: u32 = 1;
const EM_X86_64: u16 = 62;
const ET_EXEC: u16 = 2;

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// (p_type, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz) of every program header.
fn program_headers(elf: &[u8]) -> Vec<(u32, u64, u64, u64, u64, u64)> {
    let phoff = u64_at(elf, 0x20) as usize;
    let phentsize = u16_at(elf, 0x36) as usize;
    let phnum = u16_at(elf, 0x38) as usize;
    assert_eq!(phentsize, 56, "ELF64 program header size");
    (0..phnum)
        .map(|i| {
            let h = &elf[phoff + i * phentsize..][..phentsize];
            (
                u32_at(h, 0),
                u64_at(h, 8),
                u64_at(h, 16),
                u64_at(h, 24),
                u64_at(h, 32),
                u64_at(h, 40),
            )
        })
        .collect()
}

/// The payloads this file checks.
const PAYLOADS: [(&str, &[u8]); 2] = [
    ("built-in", PayloadSource::BUILTIN_ELF),
    ("hostile", HOSTILE_PAYLOAD),
];

#[test]
fn payloads_are_x86_64_executables() {
    for (what, elf) in PAYLOADS {
        is_an_x86_64_executable(what, elf);
    }
}

fn is_an_x86_64_executable(what: &str, elf: &[u8]) {
    eprintln!("checking the {what} payload");
    assert!(elf.len() > 64, "payload is {} bytes", elf.len());
    assert_eq!(&elf[..4], b"\x7fELF", "ELF magic");
    assert_eq!(elf[4], 2, "ELFCLASS64");
    assert_eq!(elf[5], 1, "little endian");
    assert_eq!(u16_at(elf, 0x10), ET_EXEC, "static executable (ET_EXEC)");
    assert_eq!(u16_at(elf, 0x12), EM_X86_64, "x86-64");
    let entry = u64_at(elf, 0x18);
    assert!(
        (PAYLOAD_START..PAYLOAD_END).contains(&entry),
        "entry {entry:#x} outside the payload range"
    );
}

#[test]
fn loadable_segments_are_inside_the_payload_range_and_file_backed() {
    for (what, elf) in PAYLOADS {
        segments_are_inside_and_file_backed(what, elf);
    }
}

fn segments_are_inside_and_file_backed(what: &str, elf: &[u8]) {
    eprintln!("checking the {what} payload");
    let loads: Vec<_> = program_headers(elf)
        .into_iter()
        .filter(|h| h.0 == PT_LOAD)
        .collect();
    assert!(!loads.is_empty(), "no PT_LOAD segment");
    for (_, offset, vaddr, paddr, filesz, memsz) in loads {
        for addr in [vaddr, paddr] {
            assert!(
                addr >= PAYLOAD_START && addr + memsz <= PAYLOAD_END,
                "segment {addr:#x}+{memsz:#x} outside [{PAYLOAD_START:#x}, {PAYLOAD_END:#x})"
            );
        }
        // linux-loader does not zero a memsz > filesz tail: .bss must be in the file.
        assert_eq!(filesz, memsz, "segment at {vaddr:#x} has a NOBITS tail");
        assert!(
            offset + filesz <= elf.len() as u64,
            "segment beyond the file"
        );
    }
}

/// Mnemonics of the x87 FPU (all start with `f`) and MMX state management.
fn is_x87_or_mmx(mnemonic: &str) -> bool {
    (mnemonic.starts_with('f') && mnemonic != "fs" && mnemonic != "fs:") || mnemonic == "emms"
}

#[test]
fn payloads_have_no_sse_avx_mmx_or_x87_instruction() {
    for (what, elf) in PAYLOADS {
        has_no_sse(what, elf);
    }
}

fn has_no_sse(what: &str, elf: &[u8]) {
    let path = std::env::temp_dir().join(format!("ipivmm-{what}-{}.elf", std::process::id()));
    std::fs::write(&path, elf).expect("write a temporary copy of the payload");
    let out = Command::new("objdump")
        .arg("-d")
        .arg("--no-show-raw-insn")
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("objdump not found: install binutils (e.g. `apt-get install binutils`; .ci/run does) to check the payload for SSE")
        }
        Err(e) => panic!("cannot run objdump: {e}"),
    };
    assert!(
        out.status.success(),
        "objdump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut bad = Vec::new();
    let mut instructions = 0;
    for line in text.lines() {
        // "  100010:\tpush   $0x0" -> the instruction is after the first tab.
        let Some((_, insn)) = line.split_once(":\t") else {
            continue;
        };
        instructions += 1;
        let mnemonic = insn.split_whitespace().next().unwrap_or("");
        let simd_reg = ["%xmm", "%ymm", "%zmm", "%mm", "%st"]
            .iter()
            .any(|r| insn.contains(r));
        if simd_reg || is_x87_or_mmx(mnemonic) {
            bad.push(line.to_string());
        }
    }
    assert!(
        instructions > 100,
        "objdump printed only {instructions} instructions of the {what} payload"
    );
    assert!(
        bad.is_empty(),
        "{} SSE/AVX/MMX/x87 instructions in the {what} payload, e.g.:\n{}",
        bad.len(),
        bad[..bad.len().min(20)].join("\n")
    );
}
