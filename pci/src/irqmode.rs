//! How a driver takes its interrupts, in upstream Redox's order (shared/reference/
//! redox-platform.md §5, §14): MSI-X, then MSI, then the legacy INTx line, and when none of them
//! is offered (or the driver is told to) no interrupt at all: the driver polls its cause
//! registers. Pure, so the choice is tested on the host.

/// What interrupt delivery a function offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IrqSupport {
    /// MSI-X table entries (0: no MSI-X capability).
    pub msix_entries: u16,
    /// An MSI capability.
    pub msi: bool,
    /// A legacy INTx line the platform can route (Redox: an ISA IRQ below 16, or a
    /// device-tree line), with its number.
    pub legacy_line: Option<u8>,
}

/// How a driver's interrupts are delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqMode {
    /// `vectors` MSI-X entries, vector i on entry i.
    MsiX { vectors: u16 },
    /// One MSI message for every cause.
    Msi,
    /// The shared INTx line: acknowledged only when the device's cause register shows a cause.
    Legacy { line: u8 },
    /// No interrupt: the driver polls its cause registers at a bounded interval.
    Polled,
}

impl IrqMode {
    /// Interrupt vectors the mode allocates.
    pub fn vectors(self) -> u16 {
        match self {
            Self::MsiX { vectors } => vectors,
            Self::Msi | Self::Legacy { .. } => 1,
            Self::Polled => 0,
        }
    }
}

impl std::fmt::Display for IrqMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MsiX { vectors: 1 } => f.write_str("MSI-X, one vector for every cause"),
            Self::MsiX { vectors } => write!(f, "MSI-X, {vectors} vectors"),
            Self::Msi => f.write_str("MSI, one message for every cause"),
            Self::Legacy { line } => write!(f, "legacy INTx line {line}"),
            Self::Polled => f.write_str("polled (no interrupt)"),
        }
    }
}

/// The modes to try, best first, ending with [`IrqMode::Polled`], for a driver that wants
/// `wanted` vectors (it can also run on one, or none). `poll` skips interrupts altogether.
/// A driver takes the first mode whose allocation succeeds.
pub fn irq_modes(support: IrqSupport, wanted: u16, poll: bool) -> Vec<IrqMode> {
    let mut modes = Vec::with_capacity(4);
    if !poll {
        let wanted = wanted.max(1);
        if support.msix_entries >= wanted {
            modes.push(IrqMode::MsiX { vectors: wanted });
        }
        if support.msix_entries >= 1 && support.msix_entries < wanted {
            modes.push(IrqMode::MsiX { vectors: 1 });
        }
        if support.msi {
            modes.push(IrqMode::Msi);
        }
        if let Some(line) = support.legacy_line {
            modes.push(IrqMode::Legacy { line });
        }
    }
    modes.push(IrqMode::Polled);
    modes
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: IrqSupport = IrqSupport {
        msix_entries: 5,
        msi: true,
        legacy_line: Some(11),
    };

    fn first(s: IrqSupport, wanted: u16, poll: bool) -> IrqMode {
        irq_modes(s, wanted, poll)[0]
    }

    #[test]
    fn msix_first_then_msi_then_the_legacy_line_then_polling() {
        assert_eq!(
            irq_modes(ALL, 2, false),
            [
                IrqMode::MsiX { vectors: 2 },
                IrqMode::Msi,
                IrqMode::Legacy { line: 11 },
                IrqMode::Polled
            ]
        );
        let no_msix = IrqSupport {
            msix_entries: 0,
            ..ALL
        };
        assert_eq!(first(no_msix, 2, false), IrqMode::Msi);
        let line_only = IrqSupport {
            legacy_line: Some(9),
            ..IrqSupport::default()
        };
        assert_eq!(first(line_only, 2, false), IrqMode::Legacy { line: 9 });
        assert_eq!(
            irq_modes(IrqSupport::default(), 2, false),
            [IrqMode::Polled]
        );
    }

    #[test]
    fn a_table_smaller_than_wanted_gives_one_shared_msix_vector() {
        let one = IrqSupport {
            msix_entries: 1,
            ..ALL
        };
        assert_eq!(
            irq_modes(one, 2, false)[..2],
            [IrqMode::MsiX { vectors: 1 }, IrqMode::Msi]
        );
        assert_eq!(first(ALL, 5, false), IrqMode::MsiX { vectors: 5 });
        assert_eq!(first(ALL, 6, false), IrqMode::MsiX { vectors: 1 });
        // Wanting none still means one, if interrupts are used at all.
        assert_eq!(first(ALL, 0, false), IrqMode::MsiX { vectors: 1 });
    }

    #[test]
    fn told_to_poll_it_polls_whatever_is_offered() {
        assert_eq!(irq_modes(ALL, 2, true), [IrqMode::Polled]);
    }

    #[test]
    fn every_mode_names_itself_and_its_vectors() {
        for (m, v, text) in [
            (IrqMode::MsiX { vectors: 2 }, 2, "MSI-X, 2 vectors"),
            (IrqMode::MsiX { vectors: 1 }, 1, "one vector"),
            (IrqMode::Msi, 1, "MSI"),
            (IrqMode::Legacy { line: 11 }, 1, "INTx line 11"),
            (IrqMode::Polled, 0, "polled"),
        ] {
            assert_eq!(m.vectors(), v, "{m:?}");
            assert!(m.to_string().contains(text), "{m}");
        }
    }
}
