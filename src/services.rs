//! What a lock service and its handles share: the core, the watchdog and
//! the wake-ups. Every round of the service (an acquire, a release, a
//! fencing read) is a free function over [`Services`].

use std::sync::Arc;

use crate::core::Core;
use crate::wake::Wake;
use crate::watchdog::Watchdog;

/// What a lock service and its handles share: the core (settings, nodes,
/// counters), the watchdog that renews its watched leases, and the
/// wake-ups of its waiters.
pub(crate) struct Services {
    pub(crate) core: Arc<Core>,
    pub(crate) watchdog: Watchdog,
    pub(crate) wake: Wake,
}

impl Services {
    pub(crate) fn new(core: Core) -> Services {
        let core = Arc::new(core);
        let config = &core.config;
        Services {
            watchdog: Watchdog::new(config.renew_interval),
            wake: Wake::new(
                config.wake_ups,
                config.required_nodes(),
                &core.nodes,
                config.connect_timeout,
            ),
            core,
        }
    }
}
