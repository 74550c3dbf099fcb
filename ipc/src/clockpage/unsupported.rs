//! Clock page backing for OSes without one (neither Linux nor Redox).

use std::path::Path;

use super::{ClockPageError, Page};

pub(super) struct Mapping {
    page: Page,
}

impl Mapping {
    pub(super) fn create(_path: &Path) -> Result<Self, ClockPageError> {
        Err(ClockPageError::Unsupported)
    }

    pub(super) fn open(_path: &Path) -> Result<Self, ClockPageError> {
        Err(ClockPageError::Unsupported)
    }

    pub(super) fn page(&self) -> &Page {
        &self.page
    }
}
