//! Results for people and programs, all from the one results model
//! ([`ipivmm_analysis::results`]): the text report, CSV rows, SVG charts, the
//! side-by-side comparison of recorded runs, and the sweep progress bar.
//! Every format is a [`sink::Sink`] in its own file, listed once in
//! [`sinks::ALL`]; what they share sits below them ([`sink`], [`error`],
//! [`style`]), and nothing here imports the registry back.
pub mod atomic;
pub mod chart_kit;
pub mod compare;
pub mod csv;
pub mod dest;
pub mod error;
pub mod fit;
pub mod guest_cal;
pub mod journal;
pub mod json;
pub mod junit;
pub mod progress;
pub mod repeats;
pub mod scale_chart;
pub mod sink;
pub mod sinks;
pub mod style;
pub mod svg;
pub mod sweep_tables;
pub mod tap;
pub mod text;
