//! The built-in ipivmm payload: one IPI workload per `BootInfo::workload`,
//! every vCPU running the same phase sequence (see [`phases`]).
#![no_std]
#![no_main]

mod all_to_all;
mod broadcast;
mod flood;
mod multicast;
mod phases;
mod pingpong;
mod self_ipi;

use ipivmm_abi::Workload;
use ipivmm_guest::{control, BootInfo};

fn main(boot: &'static BootInfo, vcpu: usize) {
    let mut ctx = phases::Ctx::new(boot, vcpu);
    match Workload::from_raw(boot.workload) {
        Some(Workload::Pingpong) => phases::run(&mut pingpong::Pingpong::new(false), &mut ctx),
        Some(Workload::PingpongHalt) => phases::run(&mut pingpong::Pingpong::new(true), &mut ctx),
        Some(Workload::Broadcast) => phases::run(&mut broadcast::Broadcast, &mut ctx),
        Some(Workload::Multicast) => phases::run(&mut multicast::Multicast::new(boot), &mut ctx),
        Some(Workload::SelfIpi) => phases::run(&mut self_ipi::SelfIpi, &mut ctx),
        Some(Workload::Flood) => phases::run(&mut flood::Flood::default(), &mut ctx),
        Some(Workload::AllToAll) => phases::run(&mut all_to_all::AllToAll, &mut ctx),
        None => control::done(2, "unknown BootInfo::workload"),
    }
}

ipivmm_guest::entry!(main);
