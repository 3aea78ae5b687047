//! Each script's text as it is sent: its own `.lua` after the shared parts
//! it calls, each defined once (`clock.lua` the server's clock, `epoch.lua`
//! a vote's epoch check, `queue.lua` the waiter queues, `layout.lua` the
//! lock keys' two forms and the keys named after them, `hold.lua` giving
//! back one hold, `won.lua` a won acquire's reply).
//! A file of constants only, so that the tests include it as it is
//! (`#[path]`) and look for the very scripts the library sends.

/// `acquire.lua`.
pub(crate) const ACQUIRE: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("queue.lua"),
    include_str!("layout.lua"),
    include_str!("won.lua"),
    // Its own keys (the epoch marker not counted) and kind (in capitals
    // when it reads the fencing counters), its arguments after the kind.
    "local ko, m, ao, kind = 0, #KEYS - 1, 1, string.lower(ARGV[1])\n",
    "local waits, queues, reads = kind ~= 'a', kind == 'q', kind ~= ARGV[1]\n",
    include_str!("acquire.lua")
);

/// `release.lua`.
pub(crate) const RELEASE: &str = concat!(
    include_str!("clock.lua"),
    include_str!("queue.lua"),
    include_str!("layout.lua"),
    include_str!("hold.lua"),
    "local ko, m, ao, leaves = 0, #KEYS, 1, ARGV[1] == 'l'\n",
    include_str!("release.lua")
);

/// `batch.lua`: the acquire and release bodies as functions, run in turn.
pub(crate) const BATCH: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("queue.lua"),
    include_str!("layout.lua"),
    include_str!("hold.lua"),
    include_str!("won.lua"),
    "local function quorumlock_acquire(ko, m, ao, waits, queues, reads)\n",
    include_str!("acquire.lua"),
    "end\nlocal function quorumlock_release(ko, m, ao, leaves)\n",
    include_str!("release.lua"),
    "end\n",
    include_str!("batch.lua")
);

/// `force_release.lua`.
pub(crate) const FORCE_RELEASE: &str = include_str!("force_release.lua");

/// `extend.lua`.
pub(crate) const EXTEND: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("layout.lua"),
    include_str!("extend.lua")
);

/// `renew.lua`.
pub(crate) const RENEW: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("layout.lua"),
    include_str!("renew.lua")
);

/// `fence.lua`.
pub(crate) const FENCE: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("layout.lua"),
    include_str!("fence.lua")
);

/// `handoff.lua`.
pub(crate) const HANDOFF: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("queue.lua"),
    include_str!("layout.lua"),
    include_str!("hold.lua"),
    include_str!("handoff.lua")
);

/// `read_fences.lua`.
pub(crate) const READ_FENCES: &str = concat!(
    include_str!("clock.lua"),
    include_str!("epoch.lua"),
    include_str!("read_fences.lua")
);

/// `epoch_check.lua`.
pub(crate) const EPOCH_CHECK: &str =
    concat!(include_str!("clock.lua"), include_str!("epoch_check.lua"));

/// `adopt.lua`.
pub(crate) const ADOPT: &str = concat!(include_str!("clock.lua"), include_str!("adopt.lua"));
