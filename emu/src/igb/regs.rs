//! BAR0 register dispatch of the igb models: the shared registers go to the [`Port`](crate::nic::Port),
//! the time-sync block to `tsync` and the stamp pairs (module docs of `igb` and `tsync`).
//!
//! Read-only to software \[assumption, as on the i225 model\]: TXSTMPL/H, RXSTMPL/H, RXSATRL/H,
//! SYSTIMR, and the VALID bits of TSYNCTXCTL and TSYNCRXCTL (hardware-owned; a write of them is
//! ignored, only a read of the pair's high register clears VALID).

use intel_regs::igb::*;
use ptp_pci::emulated::DeviceHost;

use super::{Igb, IgbPart, known};
use crate::nic::CtrlWrite;
use crate::nic::front::BarModel;
use crate::nic::sdp::PinBlock;

/// Shadow RAM write of the i210 (e1000_regs.h E1000_SRWR), as on the i225 (`nic::nvm`).
const SRWR: u32 = 0x12018;
/// EEMNGCTL of the i210 (e1000_regs.h E1000_EEMNGCTL_I210) and its CFG_DONE_PORT_0 bit
/// (e1000_defines.h E1000_NVM_CFG_DONE_PORT_0), which igb_get_cfg_done_i210 waits for.
const EEMNGCTL_I210: u32 = 0x12030;
const CFG_DONE_PORT_0: u32 = 1 << 18;
/// iNVM word-autoload record (e1000_i210.h INVM_DWORD_TO_RECORD_TYPE b2:0,
/// INVM_DWORD_TO_WORD_ADDRESS b15:9, INVM_DWORD_TO_WORD_DATA b31:16;
/// E1000_INVM_WORD_AUTOLOAD_STRUCTURE = 1).
const INVM_WORD_AUTOLOAD: u32 = 1;

impl Igb {
    /// Whether the part is of the i210 family (SRRD, SRWR, EEMNGCTL_I210, iNVM).
    fn i210_family(&self) -> bool {
        matches!(self.part, IgbPart::I210 | IgbPart::I211)
    }

    /// iNVM dword `i` (module docs, "NVM"): word-autoload records of MAC words 0–2, then
    /// zeroes (E1000_INVM_UNINITIALIZED_STRUCTURE: the end of the records).
    fn invm(&self, i: u32) -> u32 {
        let m = self.port.mac;
        match i {
            0..=2 => {
                let w = u16::from_le_bytes([m[2 * i as usize], m[2 * i as usize + 1]]);
                u32::from(w) << 16 | i << 9 | INVM_WORD_AUTOLOAD
            }
            _ => 0,
        }
    }

    /// Whether `offset` is a time-sync register of the i210/i350 interrupt block, which the
    /// 82576 model leaves to plain storage.
    fn ts_irq_reg(&self, offset: u32) -> bool {
        self.part.has_ts_interrupt() && matches!(offset, TSICR | TSIM)
    }

    /// Whether `offset` is one of the 82576's RX stamp registers.
    fn rx_reg(&self, offset: u32) -> bool {
        self.part == IgbPart::E82576 && matches!(offset, RXSTMPL | RXSTMPH | RXSATRL | RXSATRH)
    }

    /// What a read of BAR0 `offset` would return now, without its side effects (no
    /// read-to-clear, no latch, no release). For tests and inspection.
    pub fn peek(&self, offset: u32) -> u32 {
        let offset = self.canonical(offset & !3);
        if let Some(v) = self.port.peek_common(offset) {
            return v;
        }
        if self.part.has_pins() {
            if let Some(v) = self.tsync.pins.peek(offset) {
                return v;
            }
        }
        let ts = &self.tsync;
        match offset {
            CTRL if self.part.has_pins() => {
                ts.pins.ctrl_read(self.port.regs.get_reg(reg::CTRL)).bits()
            }
            CTRL_EXT if self.part.has_pins() => ts
                .pins
                .ctrl_ext_read(self.port.regs.get_reg(reg::CTRL_EXT))
                .bits(),
            SYSTIMR if self.part.latches_on_systimr() => ts.systimr(),
            SYSTIML if !self.part.latches_on_systimr() => self.tsync.phc.raw_at(self.now()) as u32,
            SYSTIML => ts.systiml(),
            SYSTIMH => ts.systimh(),
            TIMINCA => ts.phc.timinca(),
            TIMADJL => ts.timadjl,
            TIMADJH => ts.timadjh,
            TSAUXC => ts.tsauxc.bits(),
            TSICR if self.ts_irq_reg(offset) => ts.cause.tsicr.bits(),
            TSIM if self.ts_irq_reg(offset) => ts.cause.tsim.bits(),
            TSYNCTXCTL => {
                let mut v = self.tx_ctl;
                v.set(TsyncTxCtl::VALID, self.tx_pair.valid);
                v.bits()
            }
            TXSTMPL => self.tx_pair.low(),
            TXSTMPH => self.tx_pair.high(),
            TSYNCRXCTL if self.part == IgbPart::E82576 => {
                let mut v = self.port.regs.get_reg(reg::TSYNCRXCTL);
                v.set(TsyncRxCtl::VALID, self.rx_pair.valid);
                v.bits()
            }
            RXSTMPL if self.rx_reg(offset) => self.rx_pair.low(),
            RXSTMPH if self.rx_reg(offset) => self.rx_pair.high(),
            RXSATRL if self.rx_reg(offset) => self.rx_pair.attr.0,
            RXSATRH if self.rx_reg(offset) => self.rx_pair.attr.1,
            SRWR if self.i210_family() => self.port.nvm.srwr(),
            EEMNGCTL_I210 if self.i210_family() => {
                self.port.regs.get(EEMNGCTL_I210) | CFG_DONE_PORT_0
            }
            o if self.i210_family() && (known::INVM.0..=known::INVM.1).contains(&o) => {
                self.invm((o - known::INVM.0) / 4)
            }
            o if o < super::BAR0_LEN => self.port.regs.get(o),
            _ => u32::MAX,
        }
    }

    /// Records a TSYNCRXCTL value the model does not implement: an enabled TYPE other than
    /// ALL on i210/i350 (§8.2: Linux widens every filter to ALL there), TYPE ALL or a reserved
    /// one on the 82576 (§8.3: "TYPE_ALL is not possible on 82576").
    fn record_rx_ts_config(&mut self, v: TsyncRxCtl) {
        if !v.contains(TsyncRxCtl::ENABLED) {
            return;
        }
        let ty = v.rx_type();
        let modelled = match self.part {
            IgbPart::E82576 => matches!(
                ty,
                Some(RxTsType::L2V2 | RxTsType::L4V1 | RxTsType::L2L4V2 | RxTsType::EventV2)
            ),
            _ => ty == Some(RxTsType::All),
        };
        if !modelled {
            self.port.unimpl.record_value(TSYNCRXCTL, v.bits());
        }
    }
}

impl BarModel for Igb {
    fn implemented(&self, offset: u32) -> bool {
        super::known::implemented(self.part, offset)
    }

    fn sync(&mut self, host: &mut dyn DeviceHost) {
        self.sync_pins(host);
    }

    /// A BAR0 read with its side effects (§6 ICR/EICR read-to-clear, §3 SYSTIM latch, §2.4
    /// TSICR read-to-clear, §7.5 TXSTMPH release, §8.3 RXSTMPH release).
    fn read_bar0(&mut self, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        let offset = self.canonical(offset);
        if let Some(v) = self.port.read_common(offset, host) {
            return v;
        }
        let t = self.now();
        match offset {
            SYSTIMR if self.part.latches_on_systimr() => self.tsync.read_systimr(t),
            SYSTIML => self.tsync.read_systiml(t),
            TSICR if self.ts_irq_reg(offset) => {
                let v = self.tsync.cause.read();
                self.update_ts(host);
                v.bits()
            }
            TXSTMPH => self.tx_pair.read_high(),
            RXSTMPH if self.rx_reg(offset) => self.rx_pair.read_high(),
            o if self.part.has_pins() => match self.tsync.read_pin_reg(o) {
                Some(v) => v,
                None => self.peek(o),
            },
            _ => self.peek(offset),
        }
    }

    fn write_bar0(&mut self, offset: u32, v: u32, host: &mut dyn DeviceHost) {
        let offset = self.canonical(offset);
        if offset == CTRL {
            // The reset wipes CTRL too, so the other bits of this write do not stick.
            if self
                .port
                .write_ctrl(Ctrl::from_bits_retain(v), Ctrl::RST, host)
                == CtrlWrite::Reset
            {
                self.port_reset();
            }
            return self.sdp_ctrl_changed();
        }
        if self.port.write_common(offset, v, host) {
            return;
        }
        if self.part.has_pins() && self.tsync.write_pin_reg(offset, v, self.now()) {
            return;
        }
        match offset {
            SYSTIML => self.tsync.write_systiml(v),
            SYSTIMH => self.change_phc(|ts, t| ts.write_systimh(t, v)),
            TIMINCA => self.change_phc(|ts, t| ts.phc.set_timinca(t, v)),
            TIMADJL => self.tsync.timadjl = v,
            TIMADJH => self.change_phc(|ts, t| ts.write_timadjh(t, v)),
            TSAUXC => {
                self.change_phc(|ts, t| ts.write_tsauxc(t, Tsauxc::from_bits_retain(v)));
                self.update_ts(host);
            }
            CTRL_EXT => {
                self.port
                    .regs
                    .set(CTRL_EXT, v & known::write_mask(self.part, CTRL_EXT));
                self.sdp_ctrl_changed();
            }
            TSICR if self.ts_irq_reg(offset) => {
                self.tsync.cause.write(TsCause::from_bits_retain(v));
                self.update_ts(host);
            }
            TSIM if self.ts_irq_reg(offset) => {
                self.tsync.cause.tsim = TsCause::from_bits_retain(v);
                self.tsync.pins.set_tsim(self.tsync.cause.tsim);
                self.update_ts(host);
            }
            TSYNCTXCTL => self.tx_ctl = TsyncTxCtl::from_bits_retain(v) - TsyncTxCtl::VALID,
            TSYNCRXCTL => {
                let v = TsyncRxCtl::from_bits_retain(v);
                self.record_rx_ts_config(v);
                self.port
                    .regs
                    .set_reg(reg::TSYNCRXCTL, v - TsyncRxCtl::VALID);
            }
            SYSTIMR | TXSTMPL | TXSTMPH => {}
            SRWR if self.i210_family() => self.port.nvm.write_srwr(v),
            // RXSTMPL/H, RXSATRL/H (all parts), the PCS status, the wake-up packet and, on the
            // i210, RR2DCDELAY and the iNVM.
            o if known::read_only(self.part, o) => {}
            // Everything else is storage, including the ring registers (the engines read
            // them when they run), SRRCTL, RXPBS, TSYNCRXCFG, ETQF and IVAR; on the i210 the
            // bits outside Linux's register-test masks read 0 (`known::write_mask`).
            o => self.port.regs.set(o, v & known::write_mask(self.part, o)),
        }
    }
}
