//! Real-time priority for the threads that stand in for hardware and interrupt context: the
//! IRQ threads of a driver (Linux runs threaded interrupt handlers as SCHED_FIFO 50) and the
//! emulated device's model thread (hardware is never descheduled). Best effort: without the
//! privilege the thread keeps its normal priority and the caller logs it.

/// Priority of driver IRQ threads when asked for (Linux's threaded-IRQ default).
pub const IRQ_PRIORITY: i32 = 50;

/// Makes the calling thread SCHED_FIFO at `priority`.
#[cfg(target_os = "linux")]
pub fn make_current_thread_realtime(priority: i32) -> Result<(), String> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // Safety: pid 0 is the calling thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// Other platforms: not available (Redox has no scheduling classes to request).
#[cfg(not(target_os = "linux"))]
pub fn make_current_thread_realtime(_priority: i32) -> Result<(), String> {
    Err("real-time scheduling is not available on this platform".into())
}
