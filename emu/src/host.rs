//! [`DeviceHost`]s for driving a model directly (model tests, driver unit tests that skip the
//! emulated PCI backend): [`RecordingHost`] records MSI-X messages and offers no DMA memory;
//! [`MemHost`] adds DMA memory for the TX/RX engines.

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

/// A [`DeviceHost`] with DMA memory: regions at bus addresses the test chooses, plus an
/// MSI-X recorder. For driving the TX/RX engines of a model directly.
#[derive(Debug, Clone, Default)]
pub struct MemHost {
    /// Vectors raised, oldest first.
    pub raised: Vec<u16>,
    regions: Vec<(u64, Vec<u8>)>,
}

impl MemHost {
    /// No memory yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `len` zeroed bytes of DMA memory at bus address `bus`.
    pub fn add_region(&mut self, bus: u64, len: usize) {
        self.regions.push((bus, vec![0; len]));
    }

    /// Returns and forgets the vectors raised so far.
    pub fn take(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.raised)
    }

    fn find(&mut self, bus: u64, len: usize) -> Option<&mut [u8]> {
        self.regions.iter_mut().find_map(|(base, mem)| {
            let off = usize::try_from(bus.checked_sub(*base)?).ok()?;
            mem.get_mut(off..off.checked_add(len)?)
        })
    }

    /// Copies `len` bytes out of DMA memory (`None` outside every region).
    pub fn read(&mut self, bus: u64, len: usize) -> Option<Vec<u8>> {
        self.find(bus, len).map(|s| s.to_vec())
    }

    /// Copies `data` into DMA memory; false outside every region.
    pub fn write(&mut self, bus: u64, data: &[u8]) -> bool {
        match self.find(bus, data.len()) {
            Some(s) => {
                s.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// Little-endian dword at `bus` (0 outside memory).
    pub fn read_u32(&mut self, bus: u64) -> u32 {
        self.read(bus, 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

impl DeviceHost for MemHost {
    fn raise_msix(&mut self, vector: u16) {
        self.raised.push(vector);
    }

    fn dma_read(&mut self, bus: u64, out: &mut [u8]) -> bool {
        match self.find(bus, out.len()) {
            Some(s) => {
                out.copy_from_slice(s);
                true
            }
            None => false,
        }
    }

    fn dma_write(&mut self, bus: u64, data: &[u8]) -> bool {
        self.write(bus, data)
    }
}
