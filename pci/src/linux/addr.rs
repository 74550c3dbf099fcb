//! PCI addresses as sysfs names them: `DDDD:BB:DD.F`.

use super::LinuxPciError;

/// A function's address: domain, bus, device (0..=31), function (0..=7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddr {
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddr {
    /// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hexadecimal in either case.
    pub fn parse(s: &str) -> Result<Self, LinuxPciError> {
        let bad = |why: &str| LinuxPciError::BadAddress {
            addr: s.to_string(),
            why: why.to_string(),
        };
        let (head, function) = s
            .rsplit_once('.')
            .ok_or_else(|| bad("no '.' before the function number"))?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return Err(bad("expected DDDD:BB:DD.F")),
        };
        let hex = |field: &str, max_digits: usize, what: &str| -> Result<u32, LinuxPciError> {
            if field.is_empty()
                || field.len() > max_digits
                || !field.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(bad(&format!("bad {what} {field:?}")));
            }
            u32::from_str_radix(field, 16).map_err(|_| bad(&format!("bad {what} {field:?}")))
        };
        let domain = hex(domain, 4, "domain")?;
        let bus = hex(bus, 2, "bus")?;
        let device = hex(device, 2, "device")?;
        let function = hex(function, 1, "function")?;
        if device > 0x1f {
            return Err(bad("device number above 1f"));
        }
        if function > 7 {
            return Err(bad("function number above 7"));
        }
        Ok(Self {
            domain: domain as u16,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl std::fmt::Display for PciAddr {
    /// The sysfs spelling: `0000:00:04.0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}
