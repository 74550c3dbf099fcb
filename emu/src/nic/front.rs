//! The PCI front every model serves alike: BAR0 dispatch with MMIO counters, the
//! unimplemented-offset record and the read hooks, BAR3 (MSI-X table and PBA, `msix`),
//! the ground-truth observer's BAR counters, and one poll of link, TX and RX.

use std::time::Duration;

use ptp_pci::emulated::DeviceHost;

use super::{Mac, Port, ReadAction, rx, tx};

/// Size of BAR0 on every modelled part: the register space.
pub const BAR0_LEN: u32 = 128 * 1024;
/// Size of BAR3, which holds only the MSI-X table (at 0) and PBA (at 0x2000).
pub const BAR3_LEN: u32 = 16 * 1024;

/// What a model adds to [`Mac`] for the front: its implemented set and its BAR0 registers.
pub(crate) trait BarModel: Mac {
    /// Whether BAR0 `offset` (dword-aligned) is implemented (else the access is recorded).
    fn implemented(&self, offset: u32) -> bool;
    /// A BAR0 read of dword `offset` with its side effects.
    fn read_bar0(&mut self, offset: u32, host: &mut dyn DeviceHost) -> u32;
    /// A BAR0 write of dword `offset`.
    fn write_bar0(&mut self, offset: u32, value: u32, host: &mut dyn DeviceHost);
    /// Brings time-driven state (the pins) up to now before an access sees it.
    fn sync(&mut self, _host: &mut dyn DeviceHost) {}
}

/// `Device::bar_len`: BAR0 and BAR3.
pub(crate) fn bar_len(bar: u8) -> Option<u32> {
    match bar {
        0 => Some(BAR0_LEN),
        3 => Some(BAR3_LEN),
        _ => None,
    }
}

/// `Device::read32`: offsets are rounded down to their dword; beyond a BAR reads all ones.
pub(crate) fn read32<M: BarModel>(
    m: &mut M,
    bar: u8,
    offset: u32,
    host: &mut dyn DeviceHost,
) -> u32 {
    let offset = offset & !3;
    let implemented = m.implemented(offset);
    let p = m.port();
    if let Some(o) = &p.observer {
        o.bar_read();
    }
    match bar {
        0 if offset < BAR0_LEN => {
            p.counters.total_reads += 1;
            p.counters.count_read(offset);
            if !implemented {
                p.unimpl.record(offset, false);
            }
            m.sync(host);
            let v = m.read_bar0(offset, host);
            run_read_hooks(m, offset, host);
            v
        }
        3 if offset < BAR3_LEN => {
            p.counters.total_reads += 1;
            p.msix.read(offset)
        }
        // Unsupported request: all ones, as on PCIe.
        _ => u32::MAX,
    }
}

/// `Device::write32`: writes beyond a BAR are dropped.
pub(crate) fn write32<M: BarModel>(
    m: &mut M,
    bar: u8,
    offset: u32,
    v: u32,
    host: &mut dyn DeviceHost,
) {
    let offset = offset & !3;
    let implemented = m.implemented(offset);
    let p = m.port();
    if let Some(o) = &p.observer {
        o.bar_write();
    }
    match bar {
        0 if offset < BAR0_LEN => {
            p.counters.total_writes += 1;
            p.counters.count_write(offset);
            if !implemented {
                p.unimpl.record(offset, true);
            }
            m.sync(host);
            m.write_bar0(offset, v, host);
        }
        3 if offset < BAR3_LEN => {
            p.counters.total_writes += 1;
            p.msix.write(offset, v);
        }
        _ => {}
    }
}

/// Runs the actions armed for after a read of `offset` ([`Port::after_read`]).
fn run_read_hooks<M: Mac>(m: &mut M, offset: u32, host: &mut dyn DeviceHost) {
    for action in m.port().hooks.on_read(offset) {
        match action {
            ReadAction::ReleaseTx => tx::run_tx(m, host, true),
        }
    }
}

/// `Device::poll`: link (a wire may have come or gone), then the TX engine, then frames that
/// have arrived. Returns the time until the next frame arrives, or the wire's poll interval.
pub(crate) fn poll<M: Mac>(m: &mut M, host: &mut dyn DeviceHost) -> Option<Duration> {
    m.port().update_link(host);
    tx::run_tx(m, host, false);
    let busy = rx::run_rx(m, host);
    let p = m.port();
    p.report_wire_lost();
    p.next_poll(busy)
}

impl Port {
    /// BAR0 reads of the register at `offset` since the last
    /// [`reset_counters`](Self::reset_counters).
    pub fn reads(&self, offset: u32) -> u64 {
        self.counters.reads(offset)
    }

    /// BAR0 writes of the register at `offset`.
    pub fn writes(&self, offset: u32) -> u64 {
        self.counters.writes(offset)
    }

    /// Reads served on all BARs.
    pub fn total_reads(&self) -> u64 {
        self.counters.total_reads
    }

    /// Writes served on all BARs.
    pub fn total_writes(&self) -> u64 {
        self.counters.total_writes
    }

    /// Zeroes the MMIO and interrupt counters.
    pub fn reset_counters(&mut self) {
        self.counters.reset();
        self.irq.raised = [0; 32];
    }

    /// The MAC address in NVM.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Port resets since power-on.
    pub fn port_resets(&self) -> u64 {
        self.port_resets
    }

    /// Holds the TX engine until the `nth` (≥ 1) next read of BAR0 `offset` has returned its
    /// value, then runs it inside that read: frames posted meanwhile go out, latch their
    /// stamps and raise their interrupts between that read and the driver's next access.
    /// False if too many actions are armed ([`MAX_ARMED_READS`](super::MAX_ARMED_READS)).
    pub fn hold_tx_until_read(&mut self, offset: u32, nth: u32) -> bool {
        self.after_read(offset, nth, ReadAction::ReleaseTx)
    }

    /// Arms `action` for right after the `nth` (≥ 1) next read of BAR0 `offset`.
    pub fn after_read(&mut self, offset: u32, nth: u32, action: ReadAction) -> bool {
        self.hooks.arm(offset, nth, action)
    }

    /// Actions armed and not yet run.
    pub fn armed_reads(&self) -> usize {
        self.hooks.len()
    }

    /// Disarms every armed action (a held TX engine resumes at the next poll).
    pub fn disarm_reads(&mut self) {
        self.hooks.clear();
    }
}
