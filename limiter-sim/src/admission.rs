//! The rule the kernel applies at `connect()`: refuse when in-flight >= limit.

pub struct Admission {
    limit: u32,
    inflight: u32,
}

impl Admission {
    pub fn new(limit: u32) -> Self {
        Self { limit, inflight: 0 }
    }

    /// Reserve a slot; on success returns the in-flight count including this request,
    /// which is what the kernel reports with the request's sample.
    pub fn try_admit(&mut self) -> Option<u32> {
        if self.inflight >= self.limit {
            return None;
        }
        self.inflight += 1;
        Some(self.inflight)
    }

    pub fn release(&mut self) {
        self.inflight -= 1;
    }

    /// A lower limit never evicts admitted connections: in-flight drains down to it.
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn inflight(&self) -> u32 {
        self.inflight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_at_the_limit_and_drains_after_a_cut() {
        let mut a = Admission::new(2);
        assert_eq!(a.try_admit(), Some(1));
        assert_eq!(a.try_admit(), Some(2));
        assert_eq!(a.try_admit(), None);
        a.set_limit(1);
        a.release();
        assert_eq!(a.try_admit(), None, "still at the new limit of 1");
        a.release();
        assert_eq!(a.try_admit(), Some(1));
    }
}
