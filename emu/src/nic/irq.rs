//! Interrupt plumbing of i225/i226 (intel-timesync.md §6): ICR/ICS/IMS/IMC/IAM, GPIE, the
//! extended EICR/EICS/EIMS/EIMC/EIAC/EIAM set and IVAR_MISC routing of the "other" causes.

use intel_regs::e1000::{IVAR_VALID, IntCause, gpie};

/// The two causes of one queue in an IVAR0 entry (§6): RX at bits (q&1)·16, TX 8 bits above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueCause {
    /// ICR.RXT0: a received frame was written back.
    Rx,
    /// ICR.TXDW: a TX descriptor was written back.
    Tx,
}
use ptp_pci::emulated::DeviceHost;

/// ICR causes that MSI-X mode routes to the "other" vector named in IVAR_MISC b15:8 (§6) —
/// everything that is not a queue cause. Queue causes (TXDW, RXT0) reach their vectors
/// through IVAR0 (`Interrupts::queue_cause`).
pub const OTHER_CAUSES: IntCause = IntCause::LSC
    .union(IntCause::TS)
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA);

/// EICR's "other" bit outside MSI-X mode (§6: reading ICR "also clears EICR b31").
const EICR_OTHER_NON_MSIX: u32 = 1 << 31;

/// Interrupt registers plus the edge detector that decides when a message goes out.
///
/// MSI-X messages are edges: one is sent when an enabled cause becomes pending (or when the
/// driver re-arms a vector whose EICR bit is still set), never merely because a level stays
/// high. `asserted` remembers `ICR & IMS` as of the last evaluation to find those edges.
#[derive(Debug, Clone, Default)]
pub(crate) struct Interrupts {
    pub(crate) icr: IntCause,
    pub(crate) ims: IntCause,
    /// Auto-mask: outside MSI-X mode, an ICR read that finds INT_ASSERTED clears these IMS
    /// bits (Linux igc_main.c igc_intr: "upon reading ICR, interrupts are masked"; the legacy
    /// set-up igc_irq_enable writes IAM = IMS). MSI-X mode uses EIAM instead.
    pub(crate) iam: IntCause,
    pub(crate) gpie: u32,
    pub(crate) eicr: u32,
    pub(crate) eims: u32,
    pub(crate) eiac: u32,
    pub(crate) eiam: u32,
    pub(crate) ivar_misc: u32,
    asserted: IntCause,
    /// Messages sent per vector (model-side counter, survives port resets).
    pub(crate) raised: [u64; 32],
}

impl Interrupts {
    /// Power-on / port-reset state; the message counters are kept.
    pub(crate) fn reset(&mut self) {
        *self = Self {
            raised: self.raised,
            ..Self::default()
        };
    }

    fn msix_mode(&self) -> bool {
        self.gpie & gpie::MSIX_MODE != 0
    }

    /// The "other" vector: IVAR_MISC b15:8 = vector | VALID (§6). The vector field is masked
    /// to 5 bits so it always names an EICR bit.
    pub(crate) fn other_vector(&self) -> Option<u32> {
        let byte = (self.ivar_misc >> 8) & 0xFF;
        (byte & IVAR_VALID != 0).then_some(byte & 0x1F)
    }

    fn other_eicr_bit(&self) -> u32 {
        if self.msix_mode() {
            self.other_vector().map_or(0, |v| 1 << v)
        } else {
            EICR_OTHER_NON_MSIX
        }
    }

    /// ICR as a read returns it: the causes plus INT_ASSERTED when any is enabled.
    pub(crate) fn icr_value(&self) -> IntCause {
        let asserted = if self.icr.intersects(self.ims) {
            IntCause::INT_ASSERTED
        } else {
            IntCause::empty()
        };
        self.icr | asserted
    }

    /// Read of ICR: read-to-clear, and clears EICR's "other" bit (§6, igc_msix_other's
    /// comment). Clear-on-read is unconditional: GPIE.NSICR = 0 semantics (clear only while
    /// INT_ASSERTED) are not modelled \[U\]; igc always sets NSICR.
    pub(crate) fn read_icr(&mut self, host: &mut dyn DeviceHost) -> IntCause {
        let v = self.icr_value();
        // igc_intr's comment: "IMS will not auto-mask if INT_ASSERTED is not set".
        if v.contains(IntCause::INT_ASSERTED) && !self.msix_mode() {
            self.ims &= !self.iam;
        }
        self.icr = IntCause::empty();
        self.eicr &= !self.other_eicr_bit();
        self.update(host);
        v
    }

    /// Write of ICR: write-1-to-clear.
    pub(crate) fn write_icr(&mut self, v: IntCause, host: &mut dyn DeviceHost) {
        self.icr &= !v;
        self.update(host);
    }

    /// A cause becomes pending (hardware event or an ICS write).
    pub(crate) fn cause(&mut self, bits: IntCause, host: &mut dyn DeviceHost) {
        self.icr |= bits - IntCause::INT_ASSERTED;
        self.update(host);
    }

    /// A time-sync cause whose message a fault injection swallows: ICR shows the cause, but the
    /// edge is consumed without sending anything (and without setting EICR).
    pub(crate) fn cause_silent(&mut self, bits: IntCause) {
        self.icr |= bits - IntCause::INT_ASSERTED;
        self.asserted |= self.icr & self.ims;
    }

    /// A queue cause of queue `q`, routed by the IVAR0 entry `ivar_entry` (register
    /// IVAR0 + 4·(q>>1), §6). ICR shows the cause in every mode. In MSI-X mode the cause sets
    /// the EICR bit of the vector in its IVAR byte (when VALID) and sends that vector's message
    /// if EIMS enables it, with the same EIAC/EIAM side effects as the "other" vector; without
    /// MSI-X it is an ordinary ICR cause gated by IMS.
    pub(crate) fn queue_cause(
        &mut self,
        q: u32,
        cause: QueueCause,
        ivar_entry: u32,
        host: &mut dyn DeviceHost,
    ) {
        let (bit, shift) = match cause {
            QueueCause::Rx => (IntCause::RXT0, (q & 1) * 16),
            QueueCause::Tx => (IntCause::TXDW, (q & 1) * 16 + 8),
        };
        self.icr |= bit;
        if self.msix_mode() {
            let byte = (ivar_entry >> shift) & 0xFF;
            if byte & IVAR_VALID != 0 {
                let v = 1u32 << (byte & 0x1F);
                self.eicr |= v;
                self.fire_pending(v, host);
            }
        }
        self.update(host);
    }

    pub(crate) fn set_ims(&mut self, v: IntCause, host: &mut dyn DeviceHost) {
        self.ims |= v;
        self.update(host);
    }

    pub(crate) fn clear_ims(&mut self, v: IntCause, host: &mut dyn DeviceHost) {
        self.ims &= !v;
        self.update(host);
    }

    /// EICS: software-set extended causes; each enabled one sends its message.
    pub(crate) fn set_eics(&mut self, v: u32, host: &mut dyn DeviceHost) {
        self.eicr |= v;
        if self.msix_mode() {
            self.fire_pending(v, host);
        }
    }

    /// EIMS: enable vectors. Re-arming a vector whose EICR bit is still pending sends the
    /// message now — how the driver's "EIMS = other" at the end of its handler catches a cause
    /// that arrived while the vector was auto-masked.
    pub(crate) fn set_eims(&mut self, v: u32, host: &mut dyn DeviceHost) {
        self.eims |= v;
        if self.msix_mode() {
            self.fire_pending(v, host);
        }
    }

    pub(crate) fn clear_eims(&mut self, v: u32) {
        self.eims &= !v;
    }

    /// The legacy interrupt line as a level: asserted while an enabled cause is pending
    /// (`ICR & IMS`) outside MSI-X mode, as INTx is level-triggered.
    pub(crate) fn intx_level(&self) -> bool {
        !self.msix_mode() && self.icr.intersects(self.ims)
    }

    /// Read of EICR: read-to-clear.
    pub(crate) fn read_eicr(&mut self) -> u32 {
        std::mem::take(&mut self.eicr)
    }

    /// Write of EICR: write-1-to-clear.
    pub(crate) fn write_eicr(&mut self, v: u32) {
        self.eicr &= !v;
    }

    /// Re-evaluates `ICR & IMS` and signals on a rising edge.
    fn update(&mut self, host: &mut dyn DeviceHost) {
        let now = self.icr & self.ims;
        let rising = now - self.asserted;
        self.asserted = now;
        if rising.is_empty() {
            return;
        }
        if self.msix_mode() {
            if rising.intersects(OTHER_CAUSES)
                && let Some(v) = self.other_vector()
            {
                self.eicr |= 1 << v;
                self.fire_pending(1 << v, host);
            }
        } else {
            // MSI/INTx: a single message for any enabled cause. The emulated backend only has
            // MSI-X-style vectors, so it goes out as vector 0 [model assumption].
            self.eicr |= EICR_OTHER_NON_MSIX;
            self.send(0, host);
        }
    }

    /// Sends the message of every vector in `mask` whose EICR bit is set and EIMS enabled.
    fn fire_pending(&mut self, mask: u32, host: &mut dyn DeviceHost) {
        let due = mask & self.eicr & self.eims;
        for v in 0..32 {
            if due & (1 << v) != 0 {
                self.fire(v, host);
            }
        }
    }

    /// One MSI-X message on vector `v` with its auto-clear/auto-mask side effects: EIAC clears
    /// the EICR bit, EIAM (when GPIE.EIAME) clears the EIMS bit until the driver re-arms it.
    fn fire(&mut self, v: u32, host: &mut dyn DeviceHost) {
        let bit = 1u32 << v;
        self.send(v, host);
        self.eicr &= !(self.eiac & bit);
        if self.gpie & gpie::EIAME != 0 {
            self.eims &= !(self.eiam & bit);
        }
    }

    fn send(&mut self, v: u32, host: &mut dyn DeviceHost) {
        host.raise_msix(v as u16);
        if let Some(c) = self.raised.get_mut(v as usize) {
            *c += 1;
        }
    }
}
