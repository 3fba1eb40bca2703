//! HTTP handlers. They translate between HTTP and the database/storage/queue calls; the work
//! itself happens in the worker.

pub mod builds;
pub mod cdn;
pub mod dashboard;
pub mod library;
pub mod ops;
pub mod publishing;
pub mod releases;
pub mod teams;
pub mod telemetry;
pub mod uploads;
