//! A [`DeviceHost`] for driving a model directly (model tests, driver unit tests that skip the
//! emulated PCI backend): it records MSI-X messages and offers no DMA memory.

use ptp_pci::emulated::DeviceHost;

/// Records every MSI-X message a model sends, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordingHost {
    /// Vectors raised, oldest first.
    pub raised: Vec<u16>,
}

impl RecordingHost {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns and forgets the vectors raised so far.
    pub fn take(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.raised)
    }
}

impl DeviceHost for RecordingHost {
    fn raise_msix(&mut self, vector: u16) {
        self.raised.push(vector);
    }

    fn dma_read(&mut self, _bus: u64, _out: &mut [u8]) -> bool {
        false
    }

    fn dma_write(&mut self, _bus: u64, _data: &[u8]) -> bool {
        false
    }
}
