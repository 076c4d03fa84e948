//! Tools built on the workload: the benchmark (checked workload vs a raw loop) and the
//! release matrix (one seed against several releases).

pub mod bench;
pub mod matrix;
