//! Writes the flood payloads of `ipivmm_tests::floods` as ELF files, for
//! `ipivmm run --payload` (`scripts/bench-floods.sh`):
//!
//! ```sh
//! cargo run --release -p ipivmm-tests --example flood_payloads -- DIR
//! ```
//!
//! writes `DIR/{phases,records,samples,serial}.elf`.
use ipivmm::abi::PAYLOAD_START;
use ipivmm_testkit::images::elf64;
use ipivmm_tests::floods;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: flood_payloads DIR");
        return ExitCode::from(2);
    };
    let payloads = [
        ("phases", floods::PHASE_FLOOD),
        ("records", floods::RECORD_FLOOD),
        ("samples", floods::SAMPLE_FLOOD),
        ("serial", floods::SERIAL_FLOOD),
    ];
    for (name, code) in payloads {
        let path = dir.join(format!("{name}.elf"));
        if let Err(e) = std::fs::write(&path, elf64(PAYLOAD_START, code)) {
            eprintln!("flood_payloads: writing {}: {e}", path.display());
            return ExitCode::from(1);
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
